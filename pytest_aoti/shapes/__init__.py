"""Dynamic shapes: a ``dynamic_shapes`` spec inferred, formatted and checked, and the shapes an
exported program accepts read, validated and drawn. One module a job; this package exports
nothing."""
