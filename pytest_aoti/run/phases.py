"""Running a plan: the checks of :data:`~pytest_aoti.run.catalog.CHECKS`, phase by phase,
then within each phase the checks other plugins add (the ``pytest_aoti_checks`` hook).

The runner calls :meth:`PlanRun.run` with ``"eager"`` before anything is exported,
:meth:`PlanRun.exported` once the program is exported (before its compile), then
:meth:`PlanRun.compiled` and :meth:`PlanRun.result` for the checks of the engine. Within a
phase the checks run in order and the first that fails ends the check; what each passed
check measured is gathered into the :class:`~pytest_aoti.CheckResult`. What the run finds
(the random ops, the calls per input set, the figures so far) goes on the context; the plan
is never changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pytest_aoti.checks.base import (
    Check,
    CheckContext,
    CheckPlan,
    CheckResult,
    Outcome,
    Phase,
    RecordPart,
    Triage,
)
from pytest_aoti.errors import AotiCheckError, AotiUsageError
from pytest_aoti.reports.junit import PLAIN_VALUES

if TYPE_CHECKING:
    from torch.export import ExportedProgram

    from pytest_aoti.compiling.program import AotiProgram
    from pytest_aoti.tolerance import LeafStats


class PlanRun:
    """The checks of one plan and what they measured."""

    def __init__(self, plan: CheckPlan, context: CheckContext, added: Sequence[Check] = ()) -> None:
        self.plan = plan
        self.context = context
        self.added = tuple(added)
        """Checks other plugins added: each runs after the built-in checks of its phase."""
        self._stats: list[tuple[str, LeafStats]] = []
        self._input_sets = 0
        self._figures: dict[str, Any] = {}
        self._reported_by: dict[str, str] = {}
        """Which check reported each figure, to name both where two report one name."""
        self._ran: list[str] = []
        self._record = RecordPart()
        context.figures = self._figures

    def run(self, phase: Phase) -> None:
        """Every check of ``phase`` that applies to the plan: the built-in ones in the
        catalog's order, then the added ones in the order the hook returned them."""
        __tracebackhide__ = True
        from pytest_aoti.run import catalog  # read at run time: a test may extend it

        built_in = [(check, False) for check in catalog.CHECKS]
        for check, added in [*built_in, *((check, True) for check in self.added)]:
            if check.phase == phase and check.applies(self.plan, self.context):
                self._gather(check, phase, self._run(check, added=added), added=added)

    def run_on_full_copy(self, phase: Phase) -> None:
        """:meth:`run` on a plan whose module is a full copy of the plan's (weights and
        all): for the ``"eager"`` checks of a module whose export failed, which may write
        its weights in ways no program shows. Where the module cannot be copied, nothing."""
        __tracebackhide__ = True
        import copy

        try:
            module = copy.deepcopy(self.plan.module)
        except Exception:  # an uncopyable module: the export's error stands alone
            return
        plan = self.plan
        self.plan = replace(plan, module=module)
        try:
            self.run(phase)
        finally:
            self.plan = plan

    def _run(self, check: Check, *, added: bool) -> Outcome:
        """A check's run; an added check's failure names it in the finding (the record's
        ``finding.check``), its message staying the failure's first line."""
        __tracebackhide__ = True
        try:
            return check.run(self.plan, self.context)
        except AotiCheckError as error:
            if not added or error.finding.check is not None:
                raise
            raise error.amended(replace(error.finding, check=check.name)) from None

    def _gather(self, check: Check, phase: Phase, outcome: Outcome, *, added: bool) -> None:
        if phase == "engine":  # the result lists the checks of the compiled program
            self._ran.append(check.name)
        self._stats += outcome.stats
        self._input_sets += outcome.input_sets
        for name in outcome.figures:
            if added:  # a built-in check's figures are its own by declaration
                earlier = self._reported_by.get(name) or built_in_figure_owner(name)
                if earlier is not None and earlier != check.name:
                    raise AotiUsageError(
                        f"check {check.name!r} reports figure {name!r}, which check "
                        f"{earlier!r} reports too: rename the figure of {check.name!r}"
                    )
            self._reported_by[name] = check.name
        self._figures.update(outcome.figures)
        self._record += outcome.record
        if added and outcome.figures:
            self._record += self._added_figures(check.name, outcome.figures)

    def _added_figures(self, check: str, figures: Mapping[str, Any]) -> RecordPart:
        """An added check's figures in the record: ``check_figures[<check>]`` in JSON (never
        a field of the record's own) and ``aoti_<check>_<figure>`` in JUnit."""
        by_check = {**self._record.fields.get("check_figures", {}), check: dict(figures)}
        properties = tuple(
            (f"aoti_{check}_{name}", value)
            for name, value in figures.items()
            if isinstance(value, PLAIN_VALUES)
        )
        return RecordPart({"check_figures": by_check}, properties=properties)

    def exported(self, exported: ExportedProgram) -> None:
        """The program is exported: read its random ops (once: the same on a cache hit)
        onto the context, then run the checks of the ``"exported"`` phase."""
        __tracebackhide__ = True
        from pytest_aoti.compiling.random_ops import random_ops

        self.context.exported = exported
        self.context.random_ops = tuple(random_ops(exported))
        self.run("exported")

    def compiled(self, program: AotiProgram, triage: Triage | None) -> None:
        """The program is compiled: the engine phase checks it, with ``triage`` to explain
        a failure, for the plan's calls per input set (default: see below)."""
        self.context.compiled = program
        self.context.triage = triage
        # a program with buffer state is wrong only from its second call on when the
        # engine drops that state (as torch_bugs.BUFFER_STATE_NOT_CARRIED): two calls by default
        calls = self.plan.calls
        self.context.calls = calls if calls is not None else (2 if program.mutated_buffers else 1)

    def result(self) -> CheckResult:
        """Run the checks of the ``"engine"`` phase; what every check measured."""
        __tracebackhide__ = True
        from pytest_aoti.checks.precision import precision_part

        self.run("engine")
        self._record += precision_part(self._stats, self.plan.options.precision)
        return CheckResult(
            program=self.context.program,
            stats=tuple(self._stats),
            dynamic_shapes=self.plan.dynamic_shapes,
            input_sets=self._input_sets,
            figures=dict(self._figures),
            checks=tuple(self._ran),
            record=self._record,
        )


def built_in_figure_owner(name: str) -> str | None:
    """The built-in check that reports figure ``name`` (each declares its ``figures``)."""
    from pytest_aoti.run import catalog

    for check in catalog.CHECKS:
        if name in getattr(check, "figures", ()):
            return check.name
    return None
