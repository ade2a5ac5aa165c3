"""Hypothesis strategies for inputs an exported program accepts (built in
:mod:`pytest_aoti.shapes.generation`), e.g. ``@given(inputs_for(program, like=(x, y)))``."""

from __future__ import annotations

from pytest_aoti.shapes.generation import (
    InputBuilder,
    assignments,
    distinct_like,
    inputs_for,
    shapes_for,
)

__all__ = ["InputBuilder", "assignments", "distinct_like", "inputs_for", "shapes_for"]
