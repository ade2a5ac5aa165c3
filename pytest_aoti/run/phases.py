"""Running a plan: the checks of :data:`~pytest_aoti.run.catalog.CHECKS` phase by phase, each
phase's added checks after them; what the run finds goes on the context, never the plan.
No torch at import time: the catalog of checks (which imports torch) loads at the first run."""

from __future__ import annotations

import time
from collections.abc import Mapping
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
from pytest_aoti.checks.budget import CheckBudget
from pytest_aoti.checks.module_copy import copy_module
from pytest_aoti.compiling.random_ops import random_ops
from pytest_aoti.errors import AotiCheckError, AotiUsageError
from pytest_aoti.reports.junit import PLAIN_VALUES
from pytest_aoti.run.added import PluginChecks

if TYPE_CHECKING:
    from torch.export import ExportedProgram

    from pytest_aoti.compiling.program import AotiProgram
    from pytest_aoti.tolerance import LeafStats


class PlanRun:
    """The checks of one plan and what they measured."""

    def __init__(
        self, plan: CheckPlan, context: CheckContext, checks: PluginChecks | None = None
    ) -> None:
        self.plan = plan
        self.context = context
        self.checks = checks or PluginChecks()
        self._added = {id(check) for check in self.checks.added}  # named in their findings
        self._stats: list[tuple[str, LeafStats]] = []
        self._input_sets = 0
        self._figures: dict[str, Any] = {}
        self._reported_by: dict[str, str] = {}  # figure -> check, to name both on a clash
        self._ran: list[str] = []
        self._seconds: dict[str, float] = {}
        """Seconds each check took (its ``run``), by name: the record's ``seconds_by_check``."""
        self._record = RecordPart()
        context.figures = self._figures
        context.stats = self._stats
        from pytest_aoti.run import catalog  # imports torch

        self._owners = {  # figure -> the built-in check that declares it
            name: check.name
            for check in [*catalog.CHECKS, *self.checks.first, *self.checks.last]
            for name in getattr(check, "figures", ())
        }

    def run(self, phase: Phase) -> None:
        """Every check of ``phase`` that applies: the catalog's, then the hook's (the default
        plugins', the others', a ``trylast`` default plugin's)."""
        __tracebackhide__ = True
        from pytest_aoti.run import catalog  # imports torch; read at run time: a test may extend it

        for check in [*catalog.CHECKS, *self.checks.in_order()]:
            if check.phase == phase and check.applies(self.plan, self.context):
                added = id(check) in self._added
                started = time.perf_counter()
                try:
                    outcome = self._run(check, added)
                finally:
                    seconds = time.perf_counter() - started
                    self._seconds[check.name] = self._seconds.get(check.name, 0.0) + seconds
                self._gather(check, phase, outcome, added)

    def run_on_full_copy(self, phase: Phase) -> None:
        """:meth:`run` on a full copy of the module (built field by field where
        ``copy.deepcopy`` cannot copy it), if it can be copied (export failed)."""
        __tracebackhide__ = True
        try:
            module = copy_module(self.plan.module)
        except Exception:  # an uncopyable module: the export's error stands alone
            return
        plan = self.plan
        self.plan = replace(plan, module=module)
        try:
            self.run(phase)
        finally:
            self.plan = plan

    def _run(self, check: Check, added: bool) -> Outcome:
        """A check's run; an added check's failure names it in ``finding.check``."""
        __tracebackhide__ = True
        try:
            return check.run(self.plan, self.context)
        except AotiCheckError as error:
            if not added or error.finding.check is not None:
                raise
            raise error.amended(replace(error.finding, check=check.name)) from None

    def _gather(self, check: Check, phase: Phase, outcome: Outcome, added: bool) -> None:
        if phase == "engine":  # the result lists the checks of the compiled program
            self._ran.append(check.name)
        self._stats += outcome.stats
        self._input_sets += outcome.input_sets
        for name in outcome.figures:
            if added:  # a built-in check's figures are its own by declaration
                earlier = self._reported_by.get(name) or self._owners.get(name)
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
        """Undeclared figures: JSON ``check_figures[<check>]``, JUnit ``aoti_<check>_<figure>``."""
        by_check = {**self._record.fields.get("check_figures", {}), check: dict(figures)}
        properties = tuple(
            (f"aoti_{check}_{name}", value)
            for name, value in figures.items()
            if isinstance(value, PLAIN_VALUES)
        )
        return RecordPart({"check_figures": by_check}, properties=properties)

    def exported(self, exported: ExportedProgram) -> None:
        """Read the exported program's random ops, then run the ``"exported"`` checks."""
        __tracebackhide__ = True
        self.context.exported = exported
        self.context.random_ops = tuple(random_ops(exported))
        self.run("exported")

    def compiled(self, program: AotiProgram, triage: Triage | None) -> None:
        """The program is compiled: set up the engine phase, with ``triage`` for failures."""
        self.context.compiled = program
        self.context.triage = triage
        # lost buffer state shows from the second call on (torch_bugs.BUFFER_STATE_NOT_CARRIED)
        calls = self.plan.calls
        self.context.calls = calls if calls is not None else (2 if program.mutated_buffers else 1)
        # the program's size alone, never the clock: the same searches on every machine
        self.context.budget = CheckBudget.of(
            self.plan.options.budget,
            program_bytes(program.exported, self.plan.input_sets[0]),
            self.context.calls,
        )

    def run_engine_checks(self) -> CheckResult:
        """Run the ``"engine"`` checks; what every check measured."""
        __tracebackhide__ = True
        self.run("engine")
        return CheckResult(
            program=self.context.program,
            stats=tuple(self._stats),
            dynamic_shapes=self.plan.dynamic_shapes,
            input_sets=self._input_sets,
            figures=dict(self._figures),
            checks=tuple(self._ran),
            record=self._record + self.timings(),
        )

    def timings(self) -> RecordPart:
        """``seconds_by_check``: the seconds of every check that ran so far, by name;
        ``budget``: what each search planned, ran and left for later runs (the summary's
        one line adds them up); ``engine_calls``: the calls served from the engine child and
        those made here."""
        return RecordPart(
            {
                "seconds_by_check": {
                    name: round(value, 4) for name, value in self._seconds.items()
                },
                "budget": self.context.budget.to_json(),
                "engine_calls": self.context.engine_calls(),
            }
        )


def program_bytes(exported: ExportedProgram | None, example: Any) -> int:
    """The bytes of a program's weights (parameters, buffers, constants) and of its
    example's inputs: what the check budget sizes a program's searches by (the same on
    every device, unlike its package, which holds compiled kernels)."""
    from pytest_aoti.trees import tensor_bytes  # imports torch

    weights = () if exported is None else (exported.state_dict, exported.constants)
    return tensor_bytes((*weights, example))
