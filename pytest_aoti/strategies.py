"""Hypothesis strategies for inputs an exported program accepts.

Use them in your own ``@given`` tests::

    from pytest_aoti.strategies import inputs_for

    @given(inputs_for(program, like=(x, y)))
    def test_matches_eager(inputs):
        args, kwargs = inputs
        ...

The public home of :mod:`pytest_aoti.shapes.generation`, where they are built.
"""

from __future__ import annotations

from pytest_aoti.shapes.generation import (
    InputBuilder,
    assignments,
    distinct_like,
    inputs_for,
    shapes_for,
)

__all__ = ["InputBuilder", "assignments", "distinct_like", "inputs_for", "shapes_for"]
