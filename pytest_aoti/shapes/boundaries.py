"""Sizes at the edges of a program's exported ranges, and the input shapes they give."""

from __future__ import annotations

from collections.abc import Mapping

from pytest_aoti.shapes.read import ProgramShapes, SymbolRange, parse_size


def cap_range(r: SymbolRange, max_dim: int) -> tuple[int, int]:
    """``r`` as a finite range: maxima above ``max_dim`` become ``max_dim``, never below min."""
    high = max_dim if r.max is None else min(r.max, max_dim)
    return r.min, max(high, r.min)


def boundary_assignments(shapes: ProgramShapes, max_dim: int) -> list[dict[str, int]]:
    """Symbol assignments at the edges of the exported ranges: all at their minimum, all at their
    maximum, then each at one end with the others at the other. A declared maximum is used however
    large, an unbounded one capped at ``max_dim``; duplicates and ones out of an input's range go."""
    ranges = {
        name: (r.min, r.max) if r.max is not None else cap_range(r, max_dim)
        for name, r in shapes.symbols.items()
    }
    lows = {name: low for name, (low, _) in ranges.items()}
    highs = {name: high for name, (_, high) in ranges.items()}
    candidates = [lows, highs]
    for name in ranges:
        candidates.append({**highs, name: lows[name]})
        candidates.append({**lows, name: highs[name]})
    result: list[dict[str, int]] = []
    for candidate in candidates:
        if candidate not in result and assignment_fits(shapes, candidate):
            result.append(candidate)
    return result


def assignment_fits(shapes: ProgramShapes, values: Mapping[str, int]) -> bool:
    """Whether every input dim, evaluated at ``values``, lies within its allowed range."""
    for spec in shapes.inputs:
        for axis, size in enumerate(_evaluated(spec.shape, values)):
            low, high = shapes.dim_range(spec.name, axis)
            if size < low or (high is not None and size > high):
                return False
    return True


def shapes_from_assignment(
    shapes: ProgramShapes, values: Mapping[str, int]
) -> dict[str, tuple[int, ...]]:
    """Concrete shape of every tensor input for one symbol assignment."""
    return {spec.name: _evaluated(spec.shape, values) for spec in shapes.inputs}


def strides_from_assignment(
    shapes: ProgramShapes, values: Mapping[str, int]
) -> dict[str, tuple[int, ...] | None]:
    """Each tensor input's exported strides under one assignment (None where unknown)."""
    found: dict[str, tuple[int, ...] | None] = {}
    for spec in shapes.inputs:
        try:
            found[spec.name] = _evaluated(spec.strides, values) if spec.strides else None
        except (KeyError, TypeError, ValueError):  # an unbacked or unknown symbol
            found[spec.name] = None
    return found


def _evaluated(sizes: tuple[int | str, ...], values: Mapping[str, int]) -> tuple[int, ...]:
    found = []
    for size in sizes:
        if isinstance(size, int):
            found.append(size)
            continue
        if size in values:  # a dim that is one symbol: no expression to evaluate
            found.append(int(values[size]))
            continue
        expr = parse_size(size)
        found.append(int(expr.subs({s: values[str(s)] for s in expr.free_symbols})))
    return tuple(found)
