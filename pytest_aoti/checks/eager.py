"""Eager PyTorch on the example, before anything is compiled.

A module that fails by itself (an int64 input to ``nn.Linear``, a float64 module fed
float32) would otherwise fail only after an export and a compile, as torch's raw error.
Here it fails before any compile, as a finding of stage ``"eager"`` at the user's line: the
first check of the catalog, of phase ``"eager"``. It runs once torch.export traced a copy of
the module (a program that writes a Parameter is refused before any eager call); where the
export fails, it runs first, on a full copy, so that a module that fails by itself is said
as such.
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
    """Eager PyTorch runs the example before anything is compiled: a module that fails by
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
    """Call a copy of ``module`` that shares its weights on clones of the inputs (the
    caller's module and tensors are untouched); raise a stage ``"eager"``
    :class:`~pytest_aoti.AotiCheckError` from the module's own error."""
    __tracebackhide__ = True
    import torch

    from pytest_aoti.checks.module_guard import (
        assert_weights_unwritten,
        eager_copy,
        weight_versions,
    )
    from pytest_aoti.trees import clone_tree

    call_args, call_kwargs = clone_tree((tuple(args), dict(kwargs)))
    eager = eager_copy(module)
    versions = weight_versions(eager)
    try:
        with torch.no_grad():
            eager(*call_args, **call_kwargs)
    except Exception as error:  # whatever the model raises is the finding
        raise AotiCheckError(eager_finding(error)) from error
    assert_weights_unwritten(eager, versions)


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
