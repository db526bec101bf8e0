"""All verl knowledge: entry points, Hydra keys per version and strategy, features, constraints."""
