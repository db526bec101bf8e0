"""Inputs that become run-spec values: existing verl launch scripts (``verlctl import``)."""
