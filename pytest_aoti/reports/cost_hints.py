"""Why one test compiled many programs of one module, and what it cost: a test that runs 20 seeds
or 20 static shapes compiles 20 programs where seeding once or ``dynamic_shapes`` would share
one. The key's parts tell which."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pytest

from pytest_aoti.cache.history import only_weights_differ

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
    """Per module class ``test`` compiled many (:data:`MANY_PROGRAMS`+) of: count, why, cost."""
    by_module: dict[str, list[CompiledHere]] = {}
    for program in compiled:
        by_module.setdefault(program.module, []).append(program)
    lines = []
    for module, programs in by_module.items():
        if len(programs) <= MANY_PROGRAMS:
            continue
        first = programs[0].parts
        weights = sum(1 for p in programs[1:] if only_weights_differ(first, p.parts))
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
