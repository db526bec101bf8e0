"""Checks: turn a spec (and, optionally, the machine) into findings."""
