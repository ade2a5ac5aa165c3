"""The program's own constants: the scalar literals its graph calls ops with.

An engine and eager part ways near the numbers a program computes with: ``fmod(x, 1.7)`` on
bfloat16 differs only near multiples of 1.7 as bfloat16 rounds it (1.703125), a threshold
only at itself. As a fuzzer takes a program's constants into its dictionary, the draws take
these (:mod:`.classes`): each rounded to the dtype of the input, with its neighbours one ulp
away in that dtype, its negative and small multiples.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from pytest_aoti.api import AotiProgram

MAX_CONSTANTS = 8
"""Constants taken at most (the first in the graph's order): each adds eight points."""
LARGEST = 2.0**16
"""Constants beyond this magnitude are masks and sentinels (``-1e9``, ``finfo.min``), not
values the program computes near: left out."""
SMALLEST = 2.0**-24
"""Constants below this magnitude (but zero, a class of its own) are left out too."""
MULTIPLES = (-1, 2, -2, 3, -3)
"""The multiples of a constant drawn beside it."""

_SCALAR_TYPES = ("Scalar", "float", "Tensor", "number")
"""Schema types whose Python numbers are values the program computes with (an ``int``
argument is a dim or a size)."""


def graph_constants(exported: Any) -> tuple[float, ...]:
    """The scalar literals ``exported``'s graph calls ops with, in graph order, each once
    (by magnitude), at most :data:`MAX_CONSTANTS`; zeros, ±1 (already classes of every
    input), non-finite and outsized ones are left out."""
    found: list[float] = []
    for node in exported.graph.nodes:
        if node.op != "call_function":
            continue
        target = AotiProgram.NodeTarget(node.target)
        if target.aten is None:
            continue
        for value in _scalar_arguments(target, node):
            magnitude = abs(value)
            if not (SMALLEST <= magnitude <= LARGEST) or magnitude == 1.0:
                continue
            if any(abs(other) == magnitude for other in found):
                continue
            found.append(value)
            if len(found) == MAX_CONSTANTS:
                return tuple(found)
    return tuple(found)


def _scalar_arguments(target: AotiProgram.NodeTarget, node: Any) -> list[float]:
    """The Python numbers ``node`` passes where ``target`` takes a value (not a dim, a size)."""
    values: list[float] = []
    for position, argument in enumerate(target.arguments):
        if position < len(node.args):
            value = node.args[position]
        elif argument.name in node.kwargs:
            value = node.kwargs[argument.name]
        else:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        kind = str(argument.type).rstrip("?")
        if kind.startswith("Optional[") and kind.endswith("]"):
            kind = kind[len("Optional[") : -1]
        if kind not in _SCALAR_TYPES:
            continue
        if math.isfinite(float(value)):
            values.append(float(value))
    return values


def constant_points(
    constants: tuple[float, ...], dtype: torch.dtype
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The points of ``constants`` for an input of ``dtype`` and the constant each comes
    from: per constant, itself rounded to ``dtype``, its neighbours one ulp away, then its
    multiples (:data:`MULTIPLES`), each rounded; each point once."""
    points: list[float] = []
    origins: list[float] = []
    for constant in constants:
        rounded = torch.tensor(constant, dtype=torch.float64).to(dtype)
        up = torch.nextafter(rounded, torch.tensor(math.inf, dtype=dtype))
        down = torch.nextafter(rounded, torch.tensor(-math.inf, dtype=dtype))
        candidates = [float(rounded), float(up), float(down)]
        candidates += [float((rounded.double() * k).to(dtype)) for k in MULTIPLES]
        for point in candidates:
            if math.isfinite(point) and point != 0 and point not in points:
                points.append(point)
                origins.append(constant)
    return tuple(points), tuple(origins)


def rounded_text(constant: float, dtype: torch.dtype) -> str:
    """``1.7 (1.703125 in bfloat16)``: a constant as the input's dtype holds it."""
    rounded = float(torch.tensor(constant, dtype=torch.float64).to(dtype))
    name = str(dtype).removeprefix("torch.")
    if rounded == constant:
        return f"{constant:g}"
    return f"{constant:g} ({rounded:.7g} in {name})"
