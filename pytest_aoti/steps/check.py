"""The steps check: ``aoti.check(..., steps=N, next_inputs=fn)``, a decode loop of ``N``
calls on each side, compared at every step (:mod:`.chain`).

It runs after parity on the example (the chain's first step is the example itself). Each
step's engine inputs run in the crash screen's child first, one request per step. A program
with buffer state runs its chain on an engine whose buffers are read back after every step,
where torch's runner allows it; else its outputs and inputs are compared and the record says
why its buffers were not.
"""

from __future__ import annotations

from typing import Any

from pytest_aoti.checks.base import CheckContext, CheckPlan, InputSet, Outcome, Phase, RecordPart
from pytest_aoti.checks.crash_screen import CrashScreen
from pytest_aoti.checks.eager import eager_finding
from pytest_aoti.checks.eager_history import EagerRaised
from pytest_aoti.checks.parity import InputRun
from pytest_aoti.errors import AotiCheckError
from pytest_aoti.steps.chain import StepsRun


class StepsCheck:
    """The chain of ``steps`` calls fed by ``next_inputs``, eager's and the engine's."""

    name = "steps"
    figures: tuple[str, ...] = ()
    phase: Phase = "engine"

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        return plan.steps is not None and plan.next_inputs is not None and not context.random_ops

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        __tracebackhide__ = True
        assert plan.steps is not None and plan.next_inputs is not None
        program = context.program
        copies = InputRun.module_copies(plan.module)
        engine, buffers, reason = _engine(program, context)
        screen = CrashScreen.where_on(plan, context)
        run = StepsRun(
            program,
            plan.module,
            plan.input_sets[0],
            steps=plan.steps,
            next_inputs=plan.next_inputs,
            tolerance=plan.tolerance,
            eager=copies.eager().module,
            engine=engine,
            float64=copies.float64,
            screen=_screened(screen) if screen is not None else None,
            buffers=buffers,
            buffers_reason=reason,
        )
        try:
            chain = run.run()
        except EagerRaised as raised:
            finding = eager_finding(raised.error)
            raise AotiCheckError(finding) from raised.error
        ties = [f.step for f in chain.figures if f.tie is not None]
        notes: tuple[str, ...] = (
            (
                f"steps: a discrete output differed within tolerance at step(s) "
                f"{', '.join(map(str, ties))} (a tie: the engine's chain went on from eager's "
                "next inputs)",
            )
            if ties
            else ()
        )
        if chain.buffers not in ("none", "read back"):
            notes += (f"steps: buffers not compared: {chain.buffers}",)
        record = RecordPart(
            {
                "steps": {
                    "steps": chain.steps,
                    "ties": ties,
                    "buffers": chain.buffers,
                    "per_step": [f.to_json() for f in chain.figures],
                }
            },
            notes=notes,
        )
        return Outcome(stats=tuple(chain.stats), input_sets=1, record=record)


def _engine(program: Any, context: CheckContext) -> tuple[Any, Any, str]:
    """The engine the chain runs on, how its buffers are read, and how they are compared."""
    if not program.mutated_buffers:
        return program.engine_in_exported_state(), None, "none"
    from pytest_aoti.compiling import engine_state

    names = sorted(program.mutated_buffers)
    opened = engine_state.open_state_engine(program.package_path, program.device, names)
    if isinstance(opened, str):
        return program.engine_in_exported_state(), None, opened
    return opened, lambda: opened.buffers(names), "read back"


def _screened(screen: Any) -> Any:
    """Each step's engine inputs in the child first (a crash there is this step's failure)."""

    def run(inputs: InputSet, step: int) -> None:
        __tracebackhide__ = True
        screen.screen_all([inputs], [f"step {step}"])

    return run
