"""A failing draw's elements in words: each element's value, its class of special points and
the part of the compiled loop it lies in, and where two inputs' points met."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from pytest_aoti.values.classes import CONSTANTS, PointClass
from pytest_aoti.values.positions import PART_WORDS, Width, part_of


def element_text(name: str, position: Sequence[int], tensor: Any) -> str:
    """``a[3] = 0.1``: one element of a failing draw."""
    index = ", ".join(map(str, position))
    value = tensor[tuple(position)].item()
    shown = repr(value) if not isinstance(value, float) else f"{value:.7g}"
    if isinstance(value, float) and value == 0.0:
        shown = str(value)  # "-0.0" or "0.0": the sign is the point
    return f"{name}[{index}] = {shown}"


def class_in_words(classes: Sequence[PointClass], value: float, dtype: torch.dtype) -> str | None:
    """The class of special points ``value`` belongs to, in words; None: a plain value."""
    for point_class in classes:
        for point in point_class.points:
            held = float(torch.tensor(point, dtype=torch.float64).to(dtype))
            if held == value and math.copysign(1.0, held) == math.copysign(1.0, value):
                return point_class.describe(point)
    return None


def parts_in_words(position: Sequence[int], shape: tuple[int, ...], width: int) -> list[str]:
    """The parts of the loop element ``position`` of ``shape`` lies in, in words."""
    flat = 0
    for coordinate, size in zip(position, shape):
        flat = flat * size + coordinate
    return [PART_WORDS[part] for part in part_of(flat, shape, width)]


def described_elements(
    points: Sequence[tuple[str, Sequence[int]]],
    values: Mapping[str, Any],
    classes: Mapping[str, Sequence[PointClass]],
    width: Width,
) -> tuple[list[str], list[str], str | None]:
    """Each failing element (``x[16] = -0.0``), the same with its class and part (``x[16] =
    -0.0 (-0.0; the scalar tail, the last element)``), and where the points of two inputs
    met at one element (``x's -0.0 met y's +0.0 at the scalar tail, element 16``), if they
    did."""
    plain: list[str] = []
    texts: list[str] = []
    described: list[tuple[str, tuple[int, ...], str | None, list[str]]] = []
    for name, position in points:
        tensor = values[name]
        text = element_text(name, position, tensor)
        found = None
        parts: list[str] = []
        if isinstance(tensor, torch.Tensor) and tensor.dim() == len(position):
            value = tensor[tuple(position)].item()
            found = class_in_words(classes.get(name, ()), float(value), tensor.dtype)
            shape = tuple(tensor.shape)
            inner = shape[-1] if shape else 1
            parts = parts_in_words(position, shape, width(tensor.dtype, inner))
        words = "; ".join(item for item in (found, ", ".join(parts)) if item)
        plain.append(text)
        texts.append(f"{text} ({words})" if words else text)
        described.append((name, tuple(position), found, parts))
    return plain, texts, _met(described)


def _met(described: list[tuple[str, tuple[int, ...], str | None, list[str]]]) -> str | None:
    """Two points of two inputs at one element (the same index, or a one-element input's
    point meeting any element), in words; None where no two met."""
    for a in described:
        for b in described:
            if a[0] >= b[0] or a[2] is None or b[2] is None:
                continue
            one_element = (
                not a[1] or not b[1] or all(c == 0 for c in a[1]) or all(c == 0 for c in b[1])
            )
            if a[1] != b[1] and not one_element:
                continue
            element, parts = (a, a[3]) if len(a[1]) >= len(b[1]) else (b, b[3])
            where = f" at {parts[0]}" if parts else ""
            position = element[1]
            index = str(position[0]) if len(position) == 1 else str(tuple(position))
            at = f", element {index}" if position else ""
            return f"{a[0]}'s {a[2]} met {b[0]}'s {b[2]}{where}{at}"
    return None


def constant_positions(
    values: Mapping[str, Any], classes: Mapping[str, Sequence[PointClass]], limit: int
) -> tuple[list[tuple[str, list[int]]], int]:
    """Where a plain draw took, by chance, a point of the program's constants: the first
    ``limit`` such elements and how many there are in all (a failing plain draw names them
    as a planned one would)."""
    found: list[tuple[str, list[int]]] = []
    total = 0
    for name, input_classes in classes.items():
        tensor = values.get(name)
        if not isinstance(tensor, torch.Tensor) or not tensor.dtype.is_floating_point:
            continue
        for point_class in input_classes:
            if point_class.name != CONSTANTS:
                continue
            held = torch.tensor(point_class.points, dtype=torch.float64).to(tensor.dtype)
            hits = torch.isin(tensor.detach().cpu(), held)
            total += int(hits.sum())
            first = hits.nonzero()[: max(0, limit - len(found))].tolist()
            found += [(name, position) for position in first]
    return found, total


def elements_line(count: int, planned: bool) -> str:
    """What the named elements of a failing draw are: points it placed, or the program's
    constants a plain draw took by chance."""
    if not count:
        return "the plain draw (no special point) fails too"
    if planned:
        return f"{count} element(s) differ from the plain draw"
    return f"the plain draw holds {count} element(s) equal to the program's constants"


def where_lines(met: str | None, annotated: Sequence[str], shown: int) -> list[str]:
    """Where two inputs' points met, and the first ``shown`` special points, in words."""
    lines = [f"where {met}"] if met is not None else []
    if annotated:
        more = len(annotated) - shown
        listed = ", ".join(annotated[:shown])
        lines.append(f"special points: {listed}" + (f" and {more} more" if more > 0 else ""))
    return lines
