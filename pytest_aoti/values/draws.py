"""Input sets of generated values: the example's shapes, dtypes, devices and layouts, with
values of their own inside each input's observed range.

A draw mixes plain uniform values with the points where engines and eager part ways: exact
decimals (0.1 is not a binary fraction), halves, integers, signed zeros, the range's ends and
repeated values. Each draw is made from a seed derived from the test id, the program's key
and the draw's index, so a default-on check gives the same draws every run and never flakes.
Every draw is a plain draw with some elements overlaid (its ``mask``), so that a failure can
be narrowed to the fewest overlaid elements.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_aoti.shapes.generation import value_range

if TYPE_CHECKING:
    import torch

SPECIAL_FLOATS = (
    0.0,
    -0.0,
    0.1,
    0.2,
    0.3,
    0.6,
    0.7,
    1 / 3,
    2 / 3,
    0.5,
    1.5,
    2.5,
    1.0,
    2.0,
    3.0,
    10.0,
)
"""Points where an engine and eager often differ: decimals that are not binary fractions,
thirds, halves (rounding ties), small integers and both zeros; taken with both signs."""

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
them holds no repeated value."""


@dataclass(frozen=True)
class Draw:
    """One input set of generated values, by input name, and the plain draw under it."""

    index: int
    values: Mapping[str, Any]
    """Per input name: the drawn tensor (other leaves as the example has them)."""
    plain: Mapping[str, Any]
    """The same draw without the overlaid points."""
    masks: Mapping[str, torch.Tensor]
    """Per drawn input: where its values are overlaid points (bool, the input's shape)."""

    def narrowed(self, keep: Mapping[str, torch.Tensor]) -> dict[str, Any]:
        """The plain draw with only the overlaid points of ``keep`` (per input, a bool mask
        inside the draw's mask): one step of narrowing a failure."""
        import torch

        values: dict[str, Any] = {}
        for name, leaf in self.plain.items():
            if name in keep:
                where = keep[name].to(leaf.device)
                values[name] = torch.where(where, self.values[name], leaf)
            else:
                values[name] = leaf.clone() if isinstance(leaf, torch.Tensor) else leaf
        return values


def draw_seed(label: str, program_key: str, index: int) -> int:
    """The seed of draw ``index``: the same for a test and its program on every run."""
    digest = hashlib.sha256(f"{label}|{program_key}|values|{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def tie_dependent(exported: Any) -> bool:
    """Whether the exported program calls an op whose result depends on ties."""
    from pytest_aoti.compiling.graph_ops import first_call_of

    return first_call_of(exported.graph, TIE_DEPENDENT_OPS) is not None


def make_draw(
    index: int,
    seed: int,
    named: Mapping[str, Any],
    *,
    no_repeats: bool,
    keep: Iterable[str] = (),
) -> Draw:
    """Draw ``index``: each tensor of ``named`` (the example's inputs by name) replaced by one
    of its own. Inputs in ``keep`` and non-tensor leaves keep the example's values."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    kept = set(keep)
    drawn: dict[str, Any] = {}
    plain: dict[str, Any] = {}
    masks: dict[str, torch.Tensor] = {}
    for name, leaf in named.items():
        if not isinstance(leaf, torch.Tensor) or name in kept or leaf.numel() == 0:
            drawn[name] = plain[name] = leaf
            continue
        drawn[name], plain[name], masks[name] = _tensor_draw(
            leaf, index, generator, no_repeats=no_repeats
        )
    return Draw(index, drawn, plain, masks)


def _tensor_draw(
    example: torch.Tensor, index: int, generator: torch.Generator, *, no_repeats: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(values, plain values, mask) for one input, laid out in memory like ``example``."""
    import torch

    low, high = value_range(example)
    shape = tuple(example.shape)
    strides = example.stride()
    order = tuple(sorted(range(example.dim()), key=lambda dim: (-strides[dim], dim)))
    in_memory = tuple(shape[dim] for dim in order)
    numel = example.numel()
    floating = example.dtype.is_floating_point
    if example.dtype == torch.bool:
        base = torch.randint(0, 2, (numel,), generator=generator).bool()
        points = torch.tensor([False, True])
    elif floating:
        work = torch.float64 if example.dtype == torch.float64 else torch.float32
        u = torch.rand((numel,), generator=generator, dtype=work)
        base = (low + (high - low) * u).clamp(low, high)
        points = _float_points(low, high, example.dtype)
    elif example.dtype.is_complex:
        # complex inputs: plain draws only (their special points are pairs)
        work = torch.float64 if example.dtype == torch.complex128 else torch.float32
        real = low + (high - low) * torch.rand((numel,), generator=generator, dtype=work)
        imag = low + (high - low) * torch.rand((numel,), generator=generator, dtype=work)
        base = torch.complex(real, imag)
        points = torch.empty(0, dtype=base.dtype)
    else:
        low_i, high_i = int(low), int(high)
        base = torch.randint(low_i, min(high_i + 1, 2**63 - 1), (numel,), generator=generator)
        candidates = sorted({low_i, high_i, *(v for v in (0, 1, -1) if low_i <= v <= high_i)})
        points = torch.tensor(candidates, dtype=torch.int64)
    mask = torch.zeros(numel, dtype=torch.bool)
    values = base.clone()
    if points.numel():
        # each draw favours a few points, so that coincidences (1.0 over 0.1) are frequent:
        # two in turn (the draws together cover every point), two at random
        count = points.numel()
        in_turn = [(2 * index + step) % count for step in range(2)]
        at_random = torch.randperm(count, generator=generator)[:2].tolist()
        chosen = points[sorted(set(in_turn + at_random))]
        share = (0.25, 0.5, 0.75, 1.0)[index % 4]
        if no_repeats:
            # each point at most once (0.0 and -0.0 are one): a tie would make a correct
            # engine differ
            chosen = _distinct(chosen)
            count = min(chosen.numel(), numel)
            where = torch.randperm(numel, generator=generator)[:count]
            mask[where] = True
            values[where] = chosen[:count].to(values.dtype)
        else:
            mask = torch.rand(numel, generator=generator) < share
            picks = torch.randint(0, chosen.numel(), (numel,), generator=generator)
            values = torch.where(mask, chosen[picks].to(values.dtype), values)

    def laid_out(flat: torch.Tensor) -> torch.Tensor:
        shaped = flat.reshape(in_memory).to(dtype=example.dtype, device=example.device)
        return shaped.permute(*sorted(range(len(shape)), key=order.__getitem__))

    return laid_out(values), laid_out(base), laid_out(mask).to(device="cpu", dtype=torch.bool)


def _distinct(points: torch.Tensor) -> torch.Tensor:
    """``points`` with each value once, in order (equal values such as 0.0 and -0.0 once)."""
    kept: list[int] = []
    for position in range(points.numel()):
        if not any(bool(points[position] == points[other]) for other in kept):
            kept.append(position)
    return points[kept]


def _float_points(low: float, high: float, dtype: torch.dtype) -> torch.Tensor:
    """The special points inside [low, high], with its ends, as exact in ``dtype`` as it
    holds them."""
    import torch

    found: list[float] = []
    for value in (*SPECIAL_FLOATS, *(-v for v in SPECIAL_FLOATS), low, high):
        if low <= value <= high and not any(_same(value, f) for f in found):
            found.append(value)
    return torch.tensor(found, dtype=torch.float64).to(dtype)


def _same(a: float, b: float) -> bool:
    import math

    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
