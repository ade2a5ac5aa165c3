"""The special points a draw puts into an input, in classes: where engines and eager part ways.

Exact decimals (0.1 is not a binary fraction), thirds, halves (rounding ties), integers,
-0.0 and +0.0 (two classes, so that they meet each other), the input's range's ends and
the program's own constants (:mod:`.graph_constants`: rounded to the input's dtype, with
their neighbours, negatives and multiples, even outside the range); for integer inputs the
range's ends, 0 and ±1; for bool inputs False and True. A class holds only points inside
the input's range (the constants: any finite one), and a point belongs to its first class.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

FLOAT_CLASSES: tuple[tuple[str, tuple[float, ...]], ...] = (
    ("decimals", (0.1, 0.2, 0.3, 0.6, 0.7)),
    ("thirds", (1 / 3, 2 / 3)),
    ("halves", (0.5, 1.5, 2.5)),
    ("integers", (1.0, 2.0, 3.0, 10.0)),
    ("-0.0", (-0.0,)),
    ("+0.0", (0.0,)),
)
"""The float classes but the range's ends; each point is taken with both signs."""


@dataclass(frozen=True)
class PointClass:
    """One class of special points of an input: its name and its points in the input's
    range, in the order draws take them."""

    name: str
    points: tuple[float, ...]
    origins: tuple[float, ...] = ()
    """Per point of the constants' class, the program's constant it comes from."""

    @property
    def leading(self) -> bool:
        """Its pairs meet first (:mod:`.meetings`): a zero or the program's constants."""
        return self.name in LEADING_CLASSES

    def describe(self, point: float) -> str:
        """The class a point belongs to, in words (``graph constant 1.7``)."""
        if self.name != CONSTANTS:
            return self.name
        origin = next((o for p, o in zip(self.points, self.origins) if _same(p, point)), None)
        return "a graph constant" if origin is None else f"graph constant {origin:g}"


CONSTANTS = "constants"
"""The class of the program's own constants."""
ZERO_CLASSES = frozenset({"-0.0", "+0.0"})
LEADING_CLASSES = frozenset({*ZERO_CLASSES, CONSTANTS})
"""The classes whose pairs meet first."""


def point_classes(
    low: float,
    high: float,
    dtype: torch.dtype,
    constants: tuple[float, ...] = (),
) -> tuple[PointClass, ...]:
    """The classes of special points inside ``[low, high]`` for an input of ``dtype``, with
    the program's ``constants`` for a float input."""
    if dtype == torch.bool:
        return (PointClass("False", (0.0,)), PointClass("True", (1.0,)))
    if dtype.is_complex:
        return ()  # a complex point is a pair: plain draws only
    if not dtype.is_floating_point:
        ends = sorted({int(low), int(high)})
        named = [(f"{v}", v) for v in (0, 1, -1)] + [("low", ends[0]), ("high", ends[-1])]
        found: list[PointClass] = []
        seen: set[int] = set()
        for name, value in named:
            if low <= value <= high and value not in seen:
                seen.add(value)
                found.append(PointClass(name, (float(value),)))
        return tuple(found)
    taken: list[float] = []
    classes: list[PointClass] = []
    candidates = [
        (name, [signed for point in points for signed in _signed(point)])
        for name, points in FLOAT_CLASSES
    ] + [("ends", [low, high])]
    for name, points in candidates:
        inside = []
        for point in points:
            if low <= point <= high and not any(_same(point, other) for other in taken):
                taken.append(point)
                inside.append(point)
        if inside:
            classes.append(PointClass(name, tuple(inside)))
    if constants:
        from pytest_aoti.values.graph_constants import constant_points

        constant_values, origins = constant_points(constants, dtype)
        kept = [
            (point, origin)
            for point, origin in zip(constant_values, origins)
            if not any(_same(point, other) for other in taken)
        ]
        if kept:
            classes.append(
                PointClass(CONSTANTS, tuple(p for p, _ in kept), tuple(o for _, o in kept))
            )
    return tuple(classes)


def all_points(classes: tuple[PointClass, ...]) -> tuple[float, ...]:
    """Every point of ``classes``, class by class."""
    return tuple(point for point_class in classes for point in point_class.points)


def _signed(point: float) -> tuple[float, ...]:
    """``point`` and its negative (a zero stands for itself: each zero is its own class)."""
    return (point,) if point == 0 else (point, -point)


def _same(a: float, b: float) -> bool:
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
