"""The run spec: typed model, sources with provenance, resolution."""
