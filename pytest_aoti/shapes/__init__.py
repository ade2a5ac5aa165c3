"""Dynamic shapes: inferring a ``dynamic_shapes`` spec, and reading and checking the shapes
an exported program accepts.

One module a job: :mod:`~pytest_aoti.shapes.infer` (a spec from samples),
:mod:`~pytest_aoti.shapes.formatting` (a spec as Python source),
:mod:`~pytest_aoti.shapes.read` (a program's shapes and ranges),
:mod:`~pytest_aoti.shapes.validate` (inputs against them),
:mod:`~pytest_aoti.shapes.boundaries` (sizes at the edges of the ranges),
:mod:`~pytest_aoti.shapes.spec` (the user's spec and ``Dim`` names) and
:mod:`~pytest_aoti.shapes.strategies` (Hypothesis strategies; public as
:mod:`pytest_aoti.strategies`). The names below are kept here for code that imports them
from ``pytest_aoti.shapes``; the plugin's own modules import from the submodules.
"""

from __future__ import annotations

from pytest_aoti.shapes.boundaries import (
    assignment_fits,
    boundary_assignments,
    cap_range,
    shapes_from_assignment,
)
from pytest_aoti.shapes.formatting import format_dynamic_shapes
from pytest_aoti.shapes.infer import MIN_DYNAMIC_SIZE, infer_dynamic_shapes
from pytest_aoti.shapes.read import InputSpec, ProgramShapes, SymbolRange, read_program_shapes
from pytest_aoti.shapes.spec import (
    SpecAxis,
    check_dynamic_shapes,
    dim_label,
    forward_arguments,
    name_symbols,
    sizes_export_specializes,
    sizes_outside_spec,
    spec_axes,
)
from pytest_aoti.shapes.validate import solve_sizes, validate_inputs

__all__ = [
    "MIN_DYNAMIC_SIZE",
    "InputSpec",
    "ProgramShapes",
    "SpecAxis",
    "SymbolRange",
    "assignment_fits",
    "boundary_assignments",
    "cap_range",
    "check_dynamic_shapes",
    "dim_label",
    "forward_arguments",
    "format_dynamic_shapes",
    "infer_dynamic_shapes",
    "name_symbols",
    "read_program_shapes",
    "shapes_from_assignment",
    "sizes_export_specializes",
    "sizes_outside_spec",
    "solve_sizes",
    "spec_axes",
    "validate_inputs",
]
