"""Eager PyTorch and the engine called on their own clones of one input set.

What every check that compares eager with the engine shares: which module eager runs (a
copy that shares the caller's weights, so the caller's module never changes) and
the calls themselves, recorded per call as the outputs and every named input after the
call. Parity, timing, the probes and the buffer read-back take their eager module from
:func:`eager_module` (parity interleaves the two sides call by call); threads, the
random-program check and the repro bundle's replay call one side at a time through
:func:`call_history`. The probes' engine side runs in their child process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pytest_aoti.checks.module_guard import assert_weights_unwritten, eager_copy, weight_versions
from pytest_aoti.mutation_maps import named_user_inputs
from pytest_aoti.trees import clone_tree

if TYPE_CHECKING:
    import torch

    from pytest_aoti.compiling.program import AotiProgram

CallRecord = tuple[Any, dict[str, Any]]
"""One call: its outputs and every named user input after it, cloned."""


def eager_module(module: torch.nn.Module) -> torch.nn.Module:
    """The module eager runs: a copy that shares the caller's Parameters and owns its
    buffers and Python attributes (:func:`~pytest_aoti.checks.module_guard.eager_copy`),
    so a call never changes the caller's module and no weight is copied."""
    return eager_copy(module)


def call_history(
    program: AotiProgram,
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    calls: int,
    *,
    eager: bool = False,
    ready: Callable[[], object] | None = None,
    after_call: Callable[[], object] | None = None,
) -> list[CallRecord]:
    """``function`` called ``calls`` times on one clone of the inputs (state carries from
    call to call), without autograd: per call, the outputs and every named input after it.

    ``eager``: ``function`` is the module, run as :func:`eager_module` gives it.
    ``ready``: called once the inputs are cloned, just before the first call (threads
    wait there for each other). ``after_call``: called after each call, still without
    autograd (a replay reads the module's buffers there).
    """
    import torch

    called = eager_module(function) if eager else function  # type: ignore[arg-type]
    versions = weight_versions(called) if isinstance(called, torch.nn.Module) else {}
    call_args, call_kwargs = clone_tree((tuple(args), dict(kwargs)))
    named = named_user_inputs(program.exported, call_args, call_kwargs)
    if ready is not None:
        ready()
    history: list[CallRecord] = []
    with torch.no_grad():
        for _ in range(calls):
            outputs = clone_tree(called(*call_args, **call_kwargs))
            history.append((outputs, clone_tree(named)))
            if after_call is not None:
                after_call()
    if isinstance(called, torch.nn.Module):
        assert_weights_unwritten(called, versions)
    return history
