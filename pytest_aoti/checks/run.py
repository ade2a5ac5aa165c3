"""Running a plan: the checks of :data:`~pytest_aoti.checks.catalog.CHECKS`, phase by phase.

The tester calls :meth:`PlanRun.run` with ``"eager"`` before anything is exported,
:meth:`PlanRun.exported` once the program is exported (before its compile), then
:meth:`PlanRun.compiled` and :meth:`PlanRun.result` for the checks of the engine. Within a
phase the checks run in the catalog's order and the first that fails ends the check; what
each passed check measured is gathered into the :class:`~pytest_aoti.CheckResult`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_aoti.checks.base import (
    CheckContext,
    CheckPlan,
    CheckResult,
    Phase,
    RecordPart,
    Triage,
)

if TYPE_CHECKING:
    from torch.export import ExportedProgram

    from pytest_aoti.compiling.program import AotiProgram
    from pytest_aoti.tolerance import LeafStats


class PlanRun:
    """The checks of one plan and what they measured."""

    def __init__(self, plan: CheckPlan, context: CheckContext) -> None:
        self.plan = plan
        self.context = context
        self._stats: list[tuple[str, LeafStats]] = []
        self._input_sets = 0
        self._figures: dict[str, Any] = {}
        self._ran: list[str] = []
        self._record = RecordPart()

    def run(self, phase: Phase) -> None:
        """Every check of ``phase`` that applies to the plan, in the catalog's order."""
        __tracebackhide__ = True
        from pytest_aoti.checks import catalog  # read at run time: a test may extend it

        for check in catalog.CHECKS:
            if check.phase != phase or not check.applies(self.plan):
                continue
            outcome = check.run(self.plan, self.context)
            if phase == "engine":  # the result lists the checks of the compiled program
                self._ran.append(check.name)
            self._stats += outcome.stats
            self._input_sets += outcome.input_sets
            self._figures.update(outcome.figures)
            self._record += outcome.record

    def exported(self, exported: ExportedProgram) -> None:
        """The program is exported: read its random ops (once: the same on a cache hit)
        into the plan, then run the checks of the ``"exported"`` phase."""
        __tracebackhide__ = True
        from pytest_aoti.compiling.random_ops import random_ops

        self.context.exported = exported
        self.plan.random_ops = tuple(random_ops(exported))
        self.run("exported")

    def compiled(self, program: AotiProgram, triage: Triage | None, calls: int | None) -> None:
        """The program is compiled: the engine phase checks it, with ``triage`` to explain
        a failure, for ``calls`` calls per input set (None: the default)."""
        self.context.compiled = program
        self.context.triage = triage
        # a program with buffer state is wrong only from its second call on when the
        # engine drops that state (as torch_bugs.BUFFER_STATE_NOT_CARRIED): two calls by default
        self.plan.calls = calls if calls is not None else (2 if program.mutated_buffers else 1)

    def result(self) -> CheckResult:
        """Run the checks of the ``"engine"`` phase; what every check measured."""
        __tracebackhide__ = True
        self.run("engine")
        return CheckResult(
            program=self.context.program,
            stats=tuple(self._stats),
            dynamic_shapes=self.plan.dynamic_shapes,
            input_sets=self._input_sets,
            figures=dict(self._figures),
            checks=tuple(self._ran),
            record=self._record,
        )
