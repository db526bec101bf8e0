"""The interactive rounds and the blocking confirmation checklist."""
