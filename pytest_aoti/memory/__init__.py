"""Device memory an engine call allocates beyond what was allocated before it."""
