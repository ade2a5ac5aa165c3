"""The declared signature: ``mutates``/``mutated_buffers`` must match the program's graph
signature before any engine runs (else finding kind ``"signature"``)."""

from __future__ import annotations

from collections.abc import Iterable

from pytest_aoti.checks.base import CheckContext, CheckPlan, Outcome, Phase
from pytest_aoti.errors import AotiCheckError
from pytest_aoti.findings import Finding, FindingKind


class SignatureCheck:
    """The program mutates exactly the declared inputs and buffers."""

    name = "signature"
    phase: Phase = "engine"

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        return plan.mutates is not None or plan.mutated_buffers is not None

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        __tracebackhide__ = True
        program = context.program
        # their types were checked when the call was resolved, before any compile
        for what, declared, actual in (
            ("inputs", plan.mutates, program.mutated_inputs),
            ("buffers", plan.mutated_buffers, program.mutated_buffers),
        ):
            if declared is None or (expected := set(declared)) == actual:
                continue
            message = (
                f"mutated {what} differ: expected {names(expected)}, "
                f"the program mutates {names(actual)}"
            )
            if what == "inputs":
                inputs = ", ".join(program.signature.user_inputs) or "none"
                message += f"\ninputs of the program: {inputs}"
            raise AotiCheckError(
                Finding.plain(
                    FindingKind.SIGNATURE,
                    message,
                    location=f"mutated {what}",
                    extra={"expected": sorted(expected), "actual": sorted(actual)},
                )
            )
        return Outcome()


def names(names: Iterable[str]) -> str:
    """``{'x', 'y'}`` in sorted order, or ``none``."""
    ordered = sorted(names)
    return "{" + ", ".join(repr(name) for name in ordered) + "}" if ordered else "none"
