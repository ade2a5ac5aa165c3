"""Where in a compiled loop an element lies: the parts of the innermost dimension an engine's
code treats apart, so that special points meet in each.

Inductor's CPU code runs the innermost dimension as a vectorized body of ``width``
elements a step and a scalar tail of the last ``size % width`` elements of each row
(``AotiProgram.loop_width``); a bug in one part shows only there
(``1 / maximum(x, y)`` wrong at element 16 of 17). The parts, per position of a shape:

- ``first``: the first element of each innermost row;
- ``body``: the rest of the vectorized part;
- ``tail``: the last ``size % width`` elements of each row (none where it divides);
- ``last``: the tensor's last element (its flattened loop's last step too).

On a GPU, where Triton has no scalar tail, ``last`` is the last element of each row and
there is no ``tail``. A position may lie in more than one part (element 16 of 17 is in the
tail and the last).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from pytest_aoti.api import AotiProgram

PARTS = ("first", "body", "tail", "last")
"""The parts of a loop, in the order a record lists them."""
PART_WORDS = {
    "first": "the first element",
    "body": "the vectorized body",
    "tail": "the scalar tail",
    "last": "the last element",
}
"""Each part as a finding says it."""

Width = Callable[[torch.dtype, int], int]
"""``(dtype, innermost size) -> elements per vector step``; 0: a GPU (no scalar tail)."""


def loop_parts(
    positions: torch.Tensor, shape: tuple[int, ...], width: int
) -> dict[str, torch.Tensor]:
    """Per part, which of ``positions`` (flat indices into ``shape``) lie in it (bool)."""
    inner = shape[-1] if shape else 1
    count = 1
    for size in shape:
        count *= size
    column = positions % inner
    first = column == 0
    if width <= 0:  # a GPU: no scalar tail; the last element of each row
        last = column == inner - 1
        return {"first": first, "body": ~(first | last), "last": last}
    rest = inner % width
    tail = column >= inner - rest if rest else torch.zeros_like(first)
    last = positions == count - 1
    return {"first": first, "body": ~(first | tail), "tail": tail, "last": last}


def part_of(index: int, shape: tuple[int, ...], width: int) -> list[str]:
    """The parts element ``index`` (flat) of ``shape`` lies in, the narrowest first."""
    parts = loop_parts(torch.tensor([index]), shape, width)
    order = ("last", "tail", "first", "body")
    return [name for name in order if name in parts and bool(parts[name][0])]


def cpu_width() -> Width:
    """The loop width of Inductor's CPU code for this machine's ISA."""
    from pytest_aoti.api import AotiProgram

    return _cached(AotiProgram.cpu_loop_width)


def width_of(program: AotiProgram) -> Width:
    """The loop width of ``program``'s engine code (:meth:`AotiProgram.loop_width`)."""
    return _cached(program.loop_width)


def _cached(width: Width) -> Width:
    cache: dict[tuple[torch.dtype, int], int] = {}

    def cached(dtype: torch.dtype, inner: int) -> int:
        found = cache.get((dtype, inner))
        if found is None:
            found = cache[(dtype, inner)] = width(dtype, inner)
        return found

    return cached
