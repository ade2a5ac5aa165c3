"""Why one test compiled many programs of one module, and what it cost.

A test that checks a model under 20 seeds, or at 20 static shapes, compiles 20 programs
(minutes on CPU) where one would do: seeded once, the weights are the same and the
program is shared; with ``dynamic_shapes``, one program takes every shape. The key's parts
(see :class:`~pytest_aoti.cache.key.ProgramKey`) tell which: the same graph with other
weights, or another graph.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pytest

MANY_PROGRAMS = 3
"""More programs of one module class compiled by one test than this get a hint."""


@dataclass(frozen=True)
class CompiledHere:
    """A program one test compiled (not loaded, not shared), and of what."""

    module: str
    """The module's class, ``MyModel``."""
    parts: Mapping[str, str]
    """The digests of its key's parts (``graph``, ``weights``, ...)."""
    seconds: float


COMPILED_HERE = pytest.StashKey[list[CompiledHere]]()
"""The programs a test compiled, on its item's stash."""


def cost_hints(test: str, compiled: Sequence[CompiledHere]) -> list[str]:
    """One line per module class of which ``test`` compiled more than
    :data:`MANY_PROGRAMS` programs: how many, why (other weights, other shapes), the cost."""
    by_module: dict[str, list[CompiledHere]] = {}
    for program in compiled:
        by_module.setdefault(program.module, []).append(program)
    lines = []
    for module, programs in by_module.items():
        if len(programs) <= MANY_PROGRAMS:
            continue
        first = programs[0].parts
        weights = sum(1 for p in programs[1:] if _only_weights_differ(first, p.parts))
        graphs = len({p.parts.get("graph") for p in programs})
        seconds = sum(p.seconds for p in programs)
        reasons = []
        if weights:
            reasons.append(
                f"{weights + 1} differ only in their weights: seed the model once "
                "(torch.manual_seed) and they share one program"
            )
        if graphs > 1:
            reasons.append(
                f"{graphs} graphs (other shapes or other code): one program with "
                "dynamic_shapes= checks every shape"
            )
        lines.append(
            f"{test} compiled {len(programs)} programs of {module} in {seconds:.1f} s; "
            + "; ".join(reasons or ["each with other inductor configs or options"])
        )
    return lines


def _only_weights_differ(first: Mapping[str, str], other: Mapping[str, str]) -> bool:
    rest = (set(first) | set(other)) - {"weights"}
    return all(first.get(k) == other.get(k) for k in rest) and first.get("weights") != other.get(
        "weights"
    )
