"""Where two inputs meet: the draws that put every pair of special-point classes of two
inputs at one element position, in every part of the compiled loop.

A bug that needs two values at once (``1.0 // 0.1``: an integer over an exact decimal;
``minimum(-0.0, +0.0)``) shows only where the two inputs hold them at the same element, and
a bug of one part of a vectorized loop only there (:mod:`.positions`: the first element,
the vectorized body, the scalar tail, the last element). Inputs meet element by element
where their shapes are equal or broadcast (a 0-dim or one-element input meets every element
of the other). In a meeting draw every element of an input holds a special point, of class
``(index + shift) mod classes`` for its own element ``index`` (expanded dims share their
element); the planner picks each input's shift per draw, greedily, so that every pair of
classes of every two meeting inputs meets somewhere and every class of each input appears,
and then in each part of the loop: the pairs of the leading classes (the two zeros, the
program's constants) first. Small inputs get more draws: a 0-dim input shows one class a
draw. The plan depends on the inputs' sizes, dtypes and classes alone: the same every run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations

import torch

from pytest_aoti.values.positions import PARTS, Width

MEETING_CAP = 64
"""Meeting draws at most, whatever is left to meet."""
SOMEWHERE_WEIGHT = 10_000
"""What a class pair meeting for the first time anywhere counts in a draw: first, so that
the pairs meet somewhere in as few draws as without the loop's parts."""
LEADING_WEIGHT = 100
"""What a pair of leading classes (the zeros, the constants) meeting in a part of the loop
for the first time counts (a pair of zeros twice as much); any other pair counts 1."""

_POSITIONS = 2**16
"""Element positions of two broadcast inputs read to learn which class pairs can meet
(the first half and the last half: the last row, its tail and the last element)."""
_ANYWHERE = "anywhere"


@dataclass(frozen=True)
class MeetingInput:
    """An input as the planner sees it."""

    name: str
    shape: tuple[int, ...]
    distinct: tuple[int, ...]
    """Its shape with expanded (stride-0) dims of size 1: its elements of their own."""
    classes: int
    """How many classes of special points it has."""
    dtype: torch.dtype = torch.float32
    leading: frozenset[int] = field(default_factory=frozenset)
    """The indices of its leading classes: their pairs meet first."""
    zeros: frozenset[int] = field(default_factory=frozenset)
    """The indices of its zeros' classes (leading too): their pairs meet before the rest."""


def _uniform_width(dtype: torch.dtype, inner: int) -> int:
    return 16


@dataclass
class MeetingPlan:
    """The meeting draws of a check: per draw, each input's class shift, and how many class
    pairs met in each part of the loop."""

    shifts: list[dict[str, int]]
    parts: dict[str, tuple[int, int]]
    """Per part of the loop (:data:`~.positions.PARTS`): class pairs met there, of the pairs
    there are, over every two meeting inputs; parts no two inputs share are left out."""


def plan_meetings(
    inputs: Sequence[MeetingInput],
    cap: int = MEETING_CAP,
    *,
    floor: int = 0,
    width: Width = _uniform_width,
) -> list[dict[str, int]]:
    """Per meeting draw, the class shift of each input (by name): see :func:`meeting_plan`."""
    return meeting_plan(inputs, cap, floor=floor, width=width).shifts


def meeting_plan(
    inputs: Sequence[MeetingInput],
    cap: int = MEETING_CAP,
    *,
    floor: int = 0,
    width: Width = _uniform_width,
) -> MeetingPlan:
    """The meeting draws of ``inputs``: until every class pair of every two meeting inputs
    met somewhere and every class of each input appeared; then on until every pair met in
    every part of the loop (``width``: the loop's step per dtype), up to ``floor`` draws, and
    up to ``2 * floor`` while a pair of leading classes has not; ``cap`` draws at most."""
    usable = [item for item in inputs if item.classes > 0 and 0 not in item.shape]
    if not usable:
        return MeetingPlan([], {})
    pairs: dict[tuple[str, str], _Pair] = {}
    for a, b in combinations(usable, 2):
        positions = _positions(a, b, width)
        if positions is not None:
            pairs[(a.name, b.name)] = _Pair(a, b, positions)
    singles = {item.name: _Single(item) for item in usable}
    for single in singles.values():
        single.weight = SOMEWHERE_WEIGHT
    plan: list[dict[str, int]] = []
    while len(plan) < cap:
        met_somewhere = all(pair.done(_ANYWHERE) for pair in pairs.values()) and all(
            one.done for one in singles.values()
        )
        if met_somewhere and (
            all(pair.done_everywhere for pair in pairs.values())
            or len(plan) >= 2 * floor
            or (len(plan) >= floor and not any(pair.leading_left for pair in pairs.values()))
        ):
            break
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
    return MeetingPlan(plan, _parts_met(pairs.values()))


def _parts_met(pairs: Iterable[_Pair]) -> dict[str, tuple[int, int]]:
    met: dict[str, tuple[int, int]] = {}
    for pair in pairs:
        total = pair.a.classes * pair.b.classes
        for part in PARTS:
            if pair.residues.get(part):
                done, whole = met.get(part, (0, 0))
                met[part] = (done + len(pair.covered[part]), whole + total)
    return {part: met[part] for part in PARTS if part in met}


class _Single:
    """The classes one input has shown so far."""

    def __init__(self, item: MeetingInput) -> None:
        self.item = item
        count = 1
        for size in item.distinct:
            count *= size
        self.residues = {index % item.classes for index in range(min(count, item.classes))}
        self.covered: set[int] = set()
        self.weight = 1

    @property
    def done(self) -> bool:
        return len(self.covered) == self.item.classes

    def gain(self, shifts: dict[str, int]) -> int:
        return self.weight * len(self.new(shifts))

    def new(self, shifts: dict[str, int]) -> set[int]:
        n, shift = self.item.classes, shifts[self.item.name]
        return {(r + shift) % n for r in self.residues} - self.covered

    def cover(self, shifts: dict[str, int]) -> None:
        self.covered |= self.new(shifts)


class _Pair:
    """The class pairs two meeting inputs have shown so far, somewhere and in each part of
    the loop."""

    def __init__(
        self, a: MeetingInput, b: MeetingInput, residues: dict[str, set[tuple[int, int]]]
    ) -> None:
        self.a, self.b = a, b
        self.residues = residues
        self.covered: dict[str, set[tuple[int, int]]] = {part: set() for part in residues}

    def done(self, part: str) -> bool:
        return not self.residues.get(part) or len(self.covered[part]) == (
            self.a.classes * self.b.classes
        )

    @property
    def done_everywhere(self) -> bool:
        return all(self.done(part) for part in self.residues)

    def _new(self, part: str, shifts: dict[str, int]) -> set[tuple[int, int]]:
        na, nb = self.a.classes, self.b.classes
        sa, sb = shifts[self.a.name], shifts[self.b.name]
        return {((x + sa) % na, (y + sb) % nb) for x, y in self.residues[part]} - self.covered[part]

    def gain(self, shifts: dict[str, int]) -> int:
        total = 0
        leading_a, leading_b = self.a.leading, self.b.leading
        for part in self.residues:
            for x, y in self._new(part, shifts):
                if part == _ANYWHERE:
                    total += SOMEWHERE_WEIGHT
                elif x in self.a.zeros and y in self.b.zeros:
                    total += 2 * LEADING_WEIGHT
                elif x in leading_a and y in leading_b:
                    total += LEADING_WEIGHT
                else:
                    total += 1
        return total

    @property
    def leading_left(self) -> bool:
        """Whether a pair of leading classes has yet to meet in some part of the loop."""
        wanted = {(x, y) for x in self.a.leading for y in self.b.leading}
        return any(
            wanted - self.covered[part]
            for part, residues in self.residues.items()
            if part != _ANYWHERE and residues
        )

    def cover(self, shifts: dict[str, int]) -> None:
        for part in self.residues:
            self.covered[part] |= self._new(part, shifts)


def _greedy(
    inputs: Sequence[MeetingInput],
    pairs: dict[tuple[str, str], _Pair],
    singles: dict[str, _Single],
    shifts: dict[str, int],
) -> tuple[dict[str, int], int]:
    """Each input's shift in turn, the one that shows most that is new with the inputs
    before it (the first input's shift given); the shifts and what they show in all."""
    shifts = dict(shifts)
    gain = singles[inputs[0].name].gain(shifts)
    for position, item in enumerate(inputs[1:], start=1):
        earlier = [inputs[k].name for k in range(position)]
        partners = [pairs[(name, item.name)] for name in earlier if (name, item.name) in pairs]
        best_shift, best_gain = 0, -1
        for shift in range(item.classes):
            trial = {**shifts, item.name: shift}
            found = singles[item.name].gain(trial)
            found += sum(pair.gain(trial) for pair in partners)
            if found > best_gain:
                best_shift, best_gain = shift, found
        shifts[item.name] = best_shift
        gain += best_gain
    return shifts, gain


def _positions(
    a: MeetingInput, b: MeetingInput, width: Width
) -> dict[str, set[tuple[int, int]]] | None:
    """Per part of the loop (and ``anywhere``), the (element index mod classes) pairs of
    ``a`` and ``b`` at one broadcast position, read over the first and last positions; None
    where the two do not broadcast."""
    from pytest_aoti.values.positions import loop_parts

    try:
        shape = tuple(torch.broadcast_shapes(a.shape, b.shape))  # type: ignore[no-untyped-call]
    except RuntimeError:
        return None
    count = 1
    for size in shape:
        count *= size
    if count <= _POSITIONS:
        positions = torch.arange(count)
    else:
        half = _POSITIONS // 2
        positions = torch.cat([torch.arange(half), torch.arange(count - half, count)])
    index_a = _element_index(a, shape, positions) % a.classes
    index_b = _element_index(b, shape, positions) % b.classes
    codes = index_a * b.classes + index_b
    inner = shape[-1] if shape else 1
    parts = loop_parts(positions, shape, width(_loop_dtype(a.dtype, b.dtype), inner))
    parts[_ANYWHERE] = torch.ones_like(positions, dtype=torch.bool)
    return {
        part: {divmod(int(code), b.classes) for code in torch.unique(codes[where])}
        for part, where in parts.items()
        if bool(where.any())
    }


def _loop_dtype(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    """The dtype that sets the loop's step where ``a`` and ``b`` meet: a low-precision float
    where either is one (Inductor's tiling factor), else float32's."""
    for dtype in (a, b):
        if dtype in (torch.bfloat16, torch.float16):
            return dtype
    return torch.float32


def _element_index(
    item: MeetingInput, shape: tuple[int, ...], positions: torch.Tensor
) -> torch.Tensor:
    """Per flat position of the broadcast ``shape``, the index of the input's element of
    its own there."""
    index = torch.zeros_like(positions)
    rest = positions.clone()
    own = (1,) * (len(shape) - len(item.distinct)) + tuple(item.distinct)
    stride = 1
    strides = []
    for size in reversed(own):
        strides.append(stride)
        stride *= size
    strides.reverse()
    for dim in reversed(range(len(shape))):
        coordinate = rest % shape[dim]
        rest = rest // shape[dim]
        if own[dim] > 1:
            index += coordinate * strides[dim]
    return index
