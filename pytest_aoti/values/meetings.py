"""Where two inputs meet: the draws that put every pair of special-point classes of two
inputs at one element position.

A bug that needs two values at once (``1.0 // 0.1``: an integer over an exact decimal;
``minimum(-0.0, +0.0)``) shows only where the two inputs hold them at the same element.
Inputs meet element by element where their shapes are equal or broadcast (a 0-dim or
one-element input meets every element of the other). In a meeting draw every element of
an input holds a special point, of class ``(index + shift) mod classes`` for its own
element ``index`` (expanded dims share their element); the planner picks each input's
shift per draw so that every pair of classes of every two meeting inputs, and every class
of each input, appears in some draw. Small inputs get more draws: a 0-dim input shows one
class a draw. The plan depends on the inputs' sizes and classes alone: the same every run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import torch

MEETING_CAP = 64
"""Meeting draws at most, whatever is left to meet."""

_POSITIONS = 2**16
"""Element positions of two broadcast inputs read to learn which class pairs can meet."""


@dataclass(frozen=True)
class MeetingInput:
    """An input as the planner sees it."""

    name: str
    shape: tuple[int, ...]
    distinct: tuple[int, ...]
    """Its shape with expanded (stride-0) dims of size 1: its elements of their own."""
    classes: int
    """How many classes of special points it has."""


def plan_meetings(inputs: Sequence[MeetingInput], cap: int = MEETING_CAP) -> list[dict[str, int]]:
    """Per meeting draw, the class shift of each input (by name): until every class pair
    of every two meeting inputs and every class of each input appeared, or ``cap`` draws."""
    usable = [item for item in inputs if item.classes > 0 and 0 not in item.shape]
    if not usable:
        return []
    pairs: dict[tuple[str, str], _Pair] = {}
    for a, b in combinations(usable, 2):
        positions = _positions(a, b)
        if positions is not None:
            pairs[(a.name, b.name)] = _Pair(a, b, positions)
    singles = {item.name: _Single(item) for item in usable}
    plan: list[dict[str, int]] = []
    while len(plan) < cap and not (
        all(pair.done for pair in pairs.values()) and all(one.done for one in singles.values())
    ):
        best: tuple[int, dict[str, int]] = (0, {})
        first = usable[0]
        for start in range(first.classes):
            shifts, gain = _greedy(usable, pairs, singles, {first.name: start})
            if gain > best[0]:
                best = (gain, shifts)
        if best[0] == 0:
            break  # nothing left that any shifts could show
        for pair in pairs.values():
            pair.cover(best[1])
        for single in singles.values():
            single.cover(best[1])
        plan.append(best[1])
    return plan


class _Single:
    """The classes one input has shown so far."""

    def __init__(self, item: MeetingInput) -> None:
        self.item = item
        count = 1
        for size in item.distinct:
            count *= size
        self.residues = {index % item.classes for index in range(min(count, item.classes))}
        self.covered: set[int] = set()

    @property
    def done(self) -> bool:
        return len(self.covered) == self.item.classes

    def new(self, shifts: dict[str, int]) -> set[int]:
        n, shift = self.item.classes, shifts[self.item.name]
        return {(r + shift) % n for r in self.residues} - self.covered

    def cover(self, shifts: dict[str, int]) -> None:
        self.covered |= self.new(shifts)


class _Pair:
    """The class pairs two meeting inputs have shown at one position so far."""

    def __init__(self, a: MeetingInput, b: MeetingInput, residues: set[tuple[int, int]]) -> None:
        self.a, self.b = a, b
        self.residues = residues
        self.covered: set[tuple[int, int]] = set()

    @property
    def done(self) -> bool:
        return len(self.covered) == self.a.classes * self.b.classes

    def new(self, shifts: dict[str, int]) -> set[tuple[int, int]]:
        na, nb = self.a.classes, self.b.classes
        sa, sb = shifts[self.a.name], shifts[self.b.name]
        return {((x + sa) % na, (y + sb) % nb) for x, y in self.residues} - self.covered

    def cover(self, shifts: dict[str, int]) -> None:
        self.covered |= self.new(shifts)


def _greedy(
    inputs: Sequence[MeetingInput],
    pairs: dict[tuple[str, str], _Pair],
    singles: dict[str, _Single],
    shifts: dict[str, int],
) -> tuple[dict[str, int], int]:
    """Each input's shift in turn, the one that shows most that is new with the inputs
    before it (the first input's shift given); the shifts and what they show in all."""
    shifts = dict(shifts)
    gain = len(singles[inputs[0].name].new(shifts))
    for position, item in enumerate(inputs[1:], start=1):
        earlier = [inputs[k].name for k in range(position)]
        partners = [pairs[(name, item.name)] for name in earlier if (name, item.name) in pairs]
        best_shift, best_gain = 0, -1
        for shift in range(item.classes):
            trial = {**shifts, item.name: shift}
            found = len(singles[item.name].new(trial))
            found += sum(len(pair.new(trial)) for pair in partners)
            if found > best_gain:
                best_shift, best_gain = shift, found
        shifts[item.name] = best_shift
        gain += best_gain
    return shifts, gain


def _positions(a: MeetingInput, b: MeetingInput) -> set[tuple[int, int]] | None:
    """The (element index mod classes) pairs of ``a`` and ``b`` at one broadcast position,
    read over the first positions; None where the two do not broadcast."""
    try:
        shape = torch.broadcast_shapes(a.shape, b.shape)  # type: ignore[no-untyped-call]
    except RuntimeError:
        return None
    index_a = _element_index(a).broadcast_to(shape).reshape(-1)[:_POSITIONS]
    index_b = _element_index(b).broadcast_to(shape).reshape(-1)[:_POSITIONS]
    codes = (index_a % a.classes) * b.classes + index_b % b.classes
    return {divmod(int(code), b.classes) for code in torch.unique(codes)}


def _element_index(item: MeetingInput) -> torch.Tensor:
    """Per position of the input's shape, the index of its element of its own."""
    count = 1
    for size in item.distinct:
        count *= size
    return torch.arange(count).reshape(item.distinct).expand(item.shape)
