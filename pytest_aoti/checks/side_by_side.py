"""Eager PyTorch and the engine called on their own clones of one input set: the module eager
runs (:func:`eager_module`) and the calls, recorded per call (:func:`call_history`)."""

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
    """The module eager runs: a copy sharing the caller's Parameters, owning the rest."""
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
    """``function`` called ``calls`` times on one clone of the inputs, without autograd: per
    call, the outputs and every named input after it. ``eager``: ``function`` is the module;
    ``ready``: called before the first call; ``after_call``: after each."""
    import torch  # torch loads on first use

    called = eager_module(function) if eager else function  # type: ignore[arg-type]
    versions = weight_versions(called) if isinstance(called, torch.nn.Module) else {}
    call_args, call_kwargs = clone_tree((tuple(args), dict(kwargs)))
    named = named_user_inputs(program.exported, call_args, call_kwargs)
    if ready is not None:
        ready()
    history: list[CallRecord] = []
    with torch.no_grad():
        for _ in range(calls):
            history.append((clone_tree(called(*call_args, **call_kwargs)), clone_tree(named)))
            if after_call is not None:
                after_call()
    if isinstance(called, torch.nn.Module):
        assert_weights_unwritten(called, versions)
    return history
