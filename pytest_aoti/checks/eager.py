"""Eager PyTorch on the example, before anything is compiled, so a module that fails by itself
fails at the user's line (stage ``"eager"``), not as torch's raw error after a compile."""

from __future__ import annotations

from pytest_aoti.checks.base import CheckContext, CheckPlan, Outcome, Phase
from pytest_aoti.checks.module_guard import assert_weights_unwritten, eager_copy, weight_versions
from pytest_aoti.compiling.explain import source_frame
from pytest_aoti.errors import AotiCheckError
from pytest_aoti.findings import Finding, FindingKind
from pytest_aoti.trees import clone_tree


class EagerCheck:
    """Eager runs the example first: a module that fails by itself fails at once."""

    name = "eager"
    phase: Phase = "eager"

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        return True

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        """Call a weight-sharing copy of the module; raise its error as a stage ``"eager"``
        failure."""
        __tracebackhide__ = True
        import torch  # torch loads on first use

        args, kwargs = plan.input_sets[0]
        call_args, call_kwargs = clone_tree((tuple(args), dict(kwargs)))
        eager = eager_copy(plan.module)
        versions = weight_versions(eager)
        try:
            with torch.no_grad():
                eager(*call_args, **call_kwargs)
        except Exception as error:  # whatever the model raises is the finding
            raise AotiCheckError(eager_finding(error)) from error
        assert_weights_unwritten(eager, versions)
        return Outcome()


def eager_finding(error: BaseException) -> Finding:
    """The finding of a module that fails in eager PyTorch on the example."""
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
