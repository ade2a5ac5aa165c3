"""Runs the engine on probe variants in the test process's engine child
(:mod:`pytest_aoti.isolation.process`): each variant first on an engine without input
checks, then on one called with ``AOTI_RUNTIME_CHECK_INPUTS=1``. A crash or a hang ends
that child only: the job it died in is recorded as such, and a new child goes on with the
rest, until the time for the program's probes is spent.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.utils._pytree as pytree

from pytest_aoti.api import CheckContext, ProgramCall

if TYPE_CHECKING:
    from pytest_aoti.api import AotiProgram
    from pytest_aoti.probes.variants import Variant

CHILD_TIMEOUT = 120.0
"""Seconds one child process may run (startup and every job together)."""

Results = dict[tuple[int, bool], dict[str, Any]]
"""The result per ``(variant index, checked)``."""


class StartedProbes(Protocol):
    """Probe jobs the engine child works on (:meth:`CheckContext.child_jobs`)."""

    def results(self) -> Results: ...

    def discarded(self) -> None: ...


def run_child(
    program: AotiProgram,
    variants: list[Variant],
    timeout: float,
    checked: Sequence[bool] = (False, True),
) -> Results:
    """Run every variant unchecked, then with the engine's input checks (``checked``: which
    of the two), in child processes; a crash or a hang ends a child, and the next one goes
    on after the job it died in. Returns the result per ``(variant index, checked)``; a job
    that crashed or hung has ``{"crashed": why}``."""
    return child_results(start_child(program, variants, timeout, checked))


def start_child(
    program: AotiProgram,
    variants: list[Variant],
    timeout: float,
    checked: Sequence[bool] = (False, True),
) -> StartedProbes:
    """:func:`run_child` started: the child works while this process goes on; pass the
    result to :func:`child_results` (the child takes no other request before)."""
    jobs = [(index, with_checks) for with_checks in checked for index in range(len(variants))]
    device = program.device
    preparation = program.child_preparation()
    request = {
        "package": str(program.package_path),
        "device_index": device.index if device.type == "cuda" else None,
        "fresh": bool(program.mutated_buffers),
        "inputs": [copy.deepcopy(_flat_tensors(program, v)) for v in variants],
        **preparation.request(),
    }
    return CheckContext.child_jobs(
        request, jobs, timeout, preparation.path, late="not run: the probes ran out of time"
    )


def child_results(pending: StartedProbes) -> Results:
    """The result per ``(variant index, checked)`` of a :func:`start_child`."""
    results = pending.results()
    for result in results.values():
        result.pop("signal", None)
    return results


def _flat_tensors(program: AotiProgram, variant: Variant) -> list[Any]:
    """The tensor leaves of a variant in the program's input order: what the engine takes."""
    return [leaf for leaf in _ordered_leaves(program, variant)[0] if isinstance(leaf, torch.Tensor)]


def _ordered_leaves(program: AotiProgram, variant: Variant) -> tuple[list[Any], Any]:
    ordered = ProgramCall(program.exported).ordered_kwargs(variant.kwargs)
    return pytree.tree_flatten((tuple(variant.args), ordered))


def with_tensors(
    program: AotiProgram, variant: Variant, tensors: list[Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The variant's ``(args, kwargs)`` with its tensors replaced by ``tensors``."""
    leaves, spec = _ordered_leaves(program, variant)
    given = iter(tensors)
    replaced = [next(given) if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
    args, kwargs = pytree.tree_unflatten(replaced, spec)
    return tuple(args), dict(kwargs)
