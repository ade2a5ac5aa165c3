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
        mutates, mutated_buffers = plan.mutates, plan.mutated_buffers
        if mutates is not None:
            if (expected := set(mutates)) != (actual := program.mutated_inputs):
                inputs = ", ".join(program.signature.user_inputs) or "none"
                raise AotiCheckError(
                    Finding.plain(
                        FindingKind.SIGNATURE,
                        f"mutated inputs differ: expected {names(expected)}, "
                        f"the program mutates {names(actual)}\n"
                        f"inputs of the program: {inputs}",
                        location="mutated inputs",
                        extra={"expected": sorted(expected), "actual": sorted(actual)},
                    )
                )
        if mutated_buffers is not None:
            if (expected := set(mutated_buffers)) != (actual := program.mutated_buffers):
                raise AotiCheckError(
                    Finding.plain(
                        FindingKind.SIGNATURE,
                        f"mutated buffers differ: expected {names(expected)}, "
                        f"the program mutates {names(actual)}",
                        location="mutated buffers",
                        extra={"expected": sorted(expected), "actual": sorted(actual)},
                    )
                )
        return Outcome()


def names(names: Iterable[str]) -> str:
    """``{'x', 'y'}`` in sorted order, or ``none``."""
    ordered = sorted(names)
    return "{" + ", ".join(repr(name) for name in ordered) + "}" if ordered else "none"
