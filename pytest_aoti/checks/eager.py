"""Eager PyTorch on the example, before anything is exported or compiled.

A module that fails by itself (an int64 input to ``nn.Linear``, a float64 module fed
float32) would otherwise fail only after an export and a compile, as torch's raw error.
Here it fails at once, as a finding of stage ``"eager"`` at the user's line: the first
check of the catalog, of phase ``"eager"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pytest_aoti.checks.base import CheckContext, CheckPlan, Outcome, Phase
from pytest_aoti.errors import AotiCheckError
from pytest_aoti.findings import Finding, FindingKind

if TYPE_CHECKING:
    import torch


class EagerCheck:
    """Eager PyTorch runs the example before anything is exported: a module that fails by
    itself fails the check at once (stage ``"eager"``)."""

    name = "eager"
    phase: Phase = "eager"

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        return True

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        __tracebackhide__ = True
        run_eager_first(plan.module, *plan.input_sets[0])
        return Outcome()


def run_eager_first(
    module: torch.nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> None:
    """Call ``module`` on clones of the inputs, its buffers cloned too (the caller's module
    and tensors are untouched; no copy of the parameters is made); raise a stage
    ``"eager"`` :class:`~pytest_aoti.AotiCheckError` from the module's own error."""
    __tracebackhide__ = True
    import torch
    from torch.func import functional_call

    from pytest_aoti.trees import clone_tree

    call_args, call_kwargs = clone_tree((tuple(args), dict(kwargs)))
    buffers = {name: buffer.clone() for name, buffer in module.named_buffers()}
    try:
        with torch.no_grad():
            functional_call(module, buffers, call_args, call_kwargs, strict=False)
    except Exception as error:  # whatever the model raises is the finding
        raise AotiCheckError(eager_finding(error)) from error


def eager_finding(error: BaseException) -> Finding:
    """The finding of a module that fails in eager PyTorch on the example."""
    from pytest_aoti.compiling.explain import source_frame

    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    frame = source_frame(error)
    return Finding(
        kind=FindingKind.EAGER,
        location="the module",
        phrase="raised on the example inputs",
        summary=f"{type(error).__name__}: {first}" if first else type(error).__name__,
        details=tuple(frame.describe("")) if frame is not None else (),
        notes=(
            "nothing was exported or compiled: fix the model or the inputs "
            "(dtypes, devices, shapes) so that eager PyTorch runs them",
        ),
        stage="eager",
        extra={"error": type(error).__name__},
    )
