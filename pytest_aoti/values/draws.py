"""Input sets of generated values: the example's shapes, dtypes, devices and memory layouts
(sizes, strides and storage offset), with values of their own inside each input's range.

A draw holds special points (:mod:`.classes`): the first draws of a check are meeting
draws (:mod:`.meetings`), where every element holds one and every pair of classes of two
inputs that meet element by element appears at one position; the rest mix plain uniform
values with a few favoured points and repeated values. Each draw is made from a seed
derived from the test id, the program's key and the draw's index, so a default-on check
gives the same draws every run and never flakes. Every draw is a plain draw with some
elements overlaid (its ``mask``), so that a failure can be narrowed to the fewest overlaid
elements.

Values are drawn for an input's elements of their own (an expanded dim has one) and laid
out as the example lies in memory: the engine was compiled for that layout. A one-element
floating input (a temperature, a scale) is drawn between minus and plus twice its value,
so that both zeros are among its points (``[-2, 2]`` for a zero); a one-element integer
input between zero and twice its value; an input the program uses as a position
(:mod:`.position_inputs`) keeps its value.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from pytest_aoti.api import AotiProgram, InputBuilder
from pytest_aoti.values.classes import ZERO_CLASSES, PointClass, all_points, point_classes
from pytest_aoti.values.meetings import MeetingInput, MeetingPlan, meeting_plan
from pytest_aoti.values.positions import Width, cpu_width

TIE_DEPENDENT_OPS = frozenset(
    {
        "sort",
        "argsort",
        "topk",
        "unique",
        "_unique",
        "_unique2",
        "unique_consecutive",
        "unique_dim",
        "kthvalue",
        "mode",
        "median",
        "nanmedian",
        "max.dim",
        "min.dim",
        "argmax",
        "argmin",
    }
)
"""Ops whose result on equal values is not defined by value: a draw for a program with one of
them holds no repeated value (and no meeting draw, which repeats every point)."""


@dataclass(frozen=True)
class Draw:
    """One input set of generated values, by input name, and the plain draw under it.

    ``special``, ``plain`` and ``masks`` hold each drawn input's elements of their own
    (``InputBuilder.distinct_shape``); :attr:`values` lays them out like the
    example."""

    index: int
    special: Mapping[str, torch.Tensor]
    plain: Mapping[str, torch.Tensor]
    masks: Mapping[str, torch.Tensor]
    """Per drawn input: where its values are overlaid points (bool)."""
    examples: Mapping[str, Any]
    """Every input by name as the example holds it (the kept ones are used as they are)."""
    meeting: bool = False
    """A meeting draw: every element a special point, the pairs planned."""

    @property
    def values(self) -> dict[str, Any]:
        """Per input name: the drawn tensor laid out like the example (other leaves and
        kept inputs as the example has them)."""
        return self._laid_out(self.special)

    def narrowed(self, keep: Mapping[str, torch.Tensor]) -> dict[str, Any]:
        """The plain draw with only the overlaid points of ``keep`` (per input, a bool mask
        inside the draw's mask): one step of narrowing a failure."""
        chosen = {
            name: torch.where(keep[name], self.special[name], plain) if name in keep else plain
            for name, plain in self.plain.items()
        }
        return self._laid_out(chosen)

    @property
    def plain_values(self) -> dict[str, Any]:
        """The plain draw, laid out like the example."""
        return self._laid_out(self.plain)

    def _laid_out(self, drawn: Mapping[str, torch.Tensor]) -> dict[str, Any]:
        """Drawn inputs laid out like the example; the others are the example's own (each
        check's run clones its inputs)."""
        return {
            name: InputBuilder.laid_out_like(drawn[name], example) if name in drawn else example
            for name, example in self.examples.items()
        }


def draw_seed(label: str, program_key: str, index: int) -> int:
    """The seed of draw ``index``: the same for a test and its program on every run."""
    digest = hashlib.sha256(f"{label}|{program_key}|values|{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def tie_dependent(exported: Any) -> bool:
    """Whether the exported program calls an op whose result depends on ties."""
    return AotiProgram.NodeTarget.first_call_in(exported.graph, TIE_DEPENDENT_OPS) is not None


@dataclass(frozen=True)
class _Drawn:
    """What is drawn for one input: its range, classes and elements of its own."""

    example: torch.Tensor
    low: float
    high: float
    classes: tuple[PointClass, ...]
    distinct: tuple[int, ...]


class DrawPlan:
    """The draws of one check: which inputs are drawn, how, and how many draws it takes.

    ``draws`` is the least number of draws (``values_draws``); meeting draws may make it
    more for small inputs, up to :data:`~pytest_aoti.values.meetings.MEETING_CAP`, and take
    a quarter of them to meet in every part of the loop (``width``, see :mod:`.positions`),
    half while pairs of the zeros and the constants have not met in each part. ``constants``: the program's own (:mod:`.graph_constants`), points
    of every float input; ``keep``: inputs that keep the example's values (``values_skip``,
    the program's positions)."""

    def __init__(
        self,
        named: Mapping[str, Any],
        *,
        draws: int,
        no_repeats: bool,
        keep: Iterable[str] = (),
        constants: tuple[float, ...] = (),
        width: Width | None = None,
    ) -> None:
        self.named = dict(named)
        self.no_repeats = no_repeats
        self.constants = constants
        kept = set(keep)
        self.drawn: dict[str, _Drawn] = {}
        for name, leaf in self.named.items():
            if name in kept or not _is_tensor(leaf) or leaf.numel() == 0:
                continue
            if not InputBuilder.has_own_elements(leaf):
                continue  # elements that overlap in memory: no values of their own
            low, high = _range(leaf)
            if low == high and leaf.numel() == 1 and not leaf.dtype == _bool():
                continue  # NaN or an infinity alone: its value is the point
            floating = leaf.dtype.is_floating_point
            classes = point_classes(low, high, leaf.dtype, constants if floating else ())
            self.drawn[name] = _Drawn(leaf, low, high, classes, InputBuilder.distinct_shape(leaf))
        self.meeting_plan = MeetingPlan([], {})
        if not no_repeats and draws > 0:
            self.meeting_plan = meeting_plan(
                [
                    MeetingInput(
                        name,
                        tuple(d.example.shape),
                        d.distinct,
                        len(d.classes),
                        d.example.dtype,
                        frozenset(k for k, c in enumerate(d.classes) if c.leading),
                        frozenset(k for k, c in enumerate(d.classes) if c.name in ZERO_CLASSES),
                    )
                    for name, d in self.drawn.items()
                ],
                floor=draws // 4,
                width=width or cpu_width(),
            )
        self.meetings = self.meeting_plan.shifts
        self.count = max(draws, len(self.meetings)) if draws > 0 else 0
        """How many draws the check makes."""

    def draw(self, index: int, seed: int) -> Draw:
        """Draw ``index``: a meeting draw while the plan has them, then mixed ones."""
        generator = torch.Generator().manual_seed(seed)
        special: dict[str, torch.Tensor] = {}
        plain: dict[str, torch.Tensor] = {}
        masks: dict[str, torch.Tensor] = {}
        meeting = self.meetings[index] if index < len(self.meetings) else None
        for name, drawn in self.drawn.items():
            base = _plain(drawn, generator)
            if meeting is not None and name in meeting:
                values, mask = _meeting_points(drawn, meeting[name], index)
            else:
                values, mask = _mixed_points(
                    drawn, base, index, generator, no_repeats=self.no_repeats
                )
            plain[name] = base
            special[name] = torch.where(mask, values, base) if values is not base else base
            masks[name] = mask
        return Draw(index, special, plain, masks, self.named, meeting=meeting is not None)


def make_draw(
    index: int,
    seed: int,
    named: Mapping[str, Any],
    *,
    no_repeats: bool,
    keep: Iterable[str] = (),
    draws: int = 16,
    constants: tuple[float, ...] = (),
) -> Draw:
    """Draw ``index`` of a check whose example inputs are ``named``: one draw of
    :class:`DrawPlan`. Inputs in ``keep`` and non-tensor leaves keep the example's values."""
    plan = DrawPlan(named, draws=draws, no_repeats=no_repeats, keep=keep, constants=constants)
    return plan.draw(index, seed)


def _plain(drawn: _Drawn, generator: torch.Generator) -> torch.Tensor:
    """Uniform values in the input's range, over its elements of their own."""
    example, shape = drawn.example, drawn.distinct
    low, high = drawn.low, drawn.high
    if example.dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    if example.dtype.is_floating_point or example.dtype.is_complex:
        wide = example.dtype in (torch.float64, torch.complex128)
        work = torch.float64 if wide else torch.float32
        values = (low + (high - low) * torch.rand(shape, generator=generator, dtype=work)).clamp(
            low, high
        )
        if example.dtype.is_complex:
            imaginary = low + (high - low) * torch.rand(shape, generator=generator, dtype=work)
            values = torch.complex(values, imaginary.clamp(low, high))
        return values
    return torch.randint(
        int(low), min(int(high) + 1, 2**63 - 1), shape, generator=generator, dtype=torch.int64
    )


def _meeting_points(drawn: _Drawn, shift: int, index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every element a special point: class ``(element + shift) mod classes``, its points
    taken in turn across elements and draws."""
    count = len(drawn.classes)
    elements = torch.arange(_numel(drawn.distinct)).reshape(drawn.distinct)
    chosen = (elements + shift) % count
    turn = elements // count + index
    values = torch.zeros(drawn.distinct, dtype=torch.float64)
    for number, point_class in enumerate(drawn.classes):
        points = torch.tensor(point_class.points, dtype=torch.float64)
        picked = points[turn % points.numel()]
        values = torch.where(chosen == number, picked, values)
    return _as_work(values, drawn), torch.ones(drawn.distinct, dtype=torch.bool)


def _mixed_points(
    drawn: _Drawn,
    base: torch.Tensor,
    index: int,
    generator: torch.Generator,
    *,
    no_repeats: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A few favoured points over part of the plain draw (two in turn, so the draws
    together cover every point, two at random); with ``no_repeats`` each at most once."""
    points = torch.tensor(all_points(drawn.classes), dtype=torch.float64)
    mask = torch.zeros(drawn.distinct, dtype=torch.bool)
    if points.numel() == 0:
        return base, mask
    count = points.numel()
    in_turn = [(2 * index + step) % count for step in range(2)]
    at_random = torch.randperm(count, generator=generator)[:2].tolist()
    chosen = points[sorted(set(in_turn + at_random))]
    numel = _numel(drawn.distinct)
    if no_repeats:
        # each point at most once (0.0 and -0.0 are one): a tie would make a correct
        # engine differ
        chosen = _distinct(chosen)
        count = min(chosen.numel(), numel)
        where = torch.randperm(numel, generator=generator)[:count]
        flat = torch.zeros(numel, dtype=torch.float64)
        flat[where] = chosen[:count]
        mask.view(-1)[where] = True
        return _as_work(flat.reshape(drawn.distinct), drawn), mask
    share = (0.25, 0.5, 0.75, 1.0)[index % 4]
    mask = torch.rand(drawn.distinct, generator=generator) < share
    picks = torch.randint(0, chosen.numel(), drawn.distinct, generator=generator)
    return _as_work(chosen[picks], drawn), mask


def _as_work(values: torch.Tensor, drawn: _Drawn) -> torch.Tensor:
    """Points (float64) in the dtype the plain draw of the input is made in."""
    dtype = drawn.example.dtype
    if dtype == torch.bool:
        return values != 0
    if dtype.is_floating_point:
        return values.to(torch.float64 if dtype == torch.float64 else torch.float32)
    return values.to(torch.int64)


ONE_ELEMENT_ZERO_RANGE = (-2.0, 2.0)
"""The range of a one-element float input whose example is zero."""


def _range(example: torch.Tensor) -> tuple[float, float]:
    """The input's range: its [min, max] (see ``InputBuilder.value_range``); for a one-element
    floating input ``v``, ``[-2|v|, 2|v|]`` (both zeros inside; ``[-2, 2]`` for a zero); for
    a one-element integer input, zero to twice its value."""
    if example.numel() == 1 and example.dtype != torch.bool and not example.dtype.is_complex:
        value = float(example.detach().reshape(()).to("cpu"))
        if value != value or abs(value) == float("inf"):
            return value, value
        if example.dtype.is_floating_point:
            return (-2 * abs(value), 2 * abs(value)) if value else ONE_ELEMENT_ZERO_RANGE
        return (min(0.0, 2 * value), max(0.0, 2 * value)) if value else (0.0, 2.0)
    return InputBuilder.value_range(example)


def _distinct(points: torch.Tensor) -> torch.Tensor:
    """``points`` with each value once, in order (equal values such as 0.0 and -0.0 once)."""
    kept: list[int] = []
    for position in range(points.numel()):
        if not any(bool(points[position] == points[other]) for other in kept):
            kept.append(position)
    return points[kept]


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def _bool() -> torch.dtype:
    return torch.bool


def _is_tensor(leaf: Any) -> bool:
    return isinstance(leaf, torch.Tensor)
