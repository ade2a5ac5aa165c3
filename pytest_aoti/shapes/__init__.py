"""Dynamic shapes: inferring a ``dynamic_shapes`` spec, and reading and checking the shapes
an exported program accepts.

One module a job, imported by its own name (this package exports nothing):
:mod:`~pytest_aoti.shapes.infer` (a spec from samples),
:mod:`~pytest_aoti.shapes.formatting` (a spec as Python source),
:mod:`~pytest_aoti.shapes.read` (a program's shapes and ranges),
:mod:`~pytest_aoti.shapes.validate` (inputs against them),
:mod:`~pytest_aoti.shapes.boundaries` (sizes at the edges of the ranges),
:mod:`~pytest_aoti.shapes.user_spec` (the user's spec and ``Dim`` names) and
:mod:`~pytest_aoti.shapes.generation` (Hypothesis strategies; public as
:mod:`pytest_aoti.strategies`).
"""
