"""Render the launch scripts and the resolved spec."""
