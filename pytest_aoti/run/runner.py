"""The runner that owns one ``aoti.check`` (or ``aoti.compile``) call from eager to result:
the phases' checks around the export and the compile, told to the session (:class:`CheckEvents`).
No torch at import time: ``import pytest_aoti`` loads this module (through the tester)."""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytest_aoti.cache.weight_digests import WeightDigests
from pytest_aoti.checks import base as check_base
from pytest_aoti.checks.base import CheckContext, CheckPlan, CheckResult, Triage
from pytest_aoti.checks.module_copy import copy_refusal
from pytest_aoti.checks.module_guard import eager_copy, parameter_write_error, parameter_writes
from pytest_aoti.checks.signature import names
from pytest_aoti.compiling.library_warnings import library_warnings_recorded
from pytest_aoti.compiling.pipeline import export_module
from pytest_aoti.errors import AotiCheckError, AotiCompileError, AotiExportError
from pytest_aoti.findings import layouts_lead
from pytest_aoti.isolation.process import (
    preload_engine,
    prestart_engine_child,
    release_engine,
)
from pytest_aoti.run.added import PluginChecks
from pytest_aoti.run.phases import PlanRun
from pytest_aoti.shapes.formatting import format_dynamic_shapes
from pytest_aoti.trees import LAYOUTS, relaid_tree

if TYPE_CHECKING:
    import pytest
    import torch
    from torch.export import ExportedProgram

    from pytest_aoti.cache.registry import ProgramRegistry
    from pytest_aoti.compiling.program import AotiProgram

DIGESTS_DURING_EXPORT_FROM = 2**24
"""Weight bytes from which the key's digests are taken in a thread during the export."""


class CheckEvents(Protocol):
    """What a runner tells its surroundings (the pytest session, for the ``aoti`` fixture)."""

    def compiled(self, program: AotiProgram) -> None: ...

    def not_compiled(self, error: Exception, seconds: float) -> None:
        """A check failed before it had a program (eager, export, compile, random ops)."""

    def note(self, message: str) -> None:
        """Something worth saying that fails nothing (buffer state, torch's own warnings)."""

    def checked(
        self,
        program: AotiProgram,
        result: CheckResult | None,
        error: AotiCheckError | None,
        context: CheckContext,
        seconds: float,
    ) -> None:
        """A check ended: passed with ``result``, or failed with ``error``."""

    def profile_path(self) -> Path | None: ...

    def built(self, program: AotiProgram, module: str) -> None:
        """This call compiled ``program`` from a module of class ``module``."""

    def triage(
        self,
        program: AotiProgram,
        plan: CheckPlan,
        *,
        registry: ProgramRegistry,
        device: torch.device,
        label: str,
    ) -> Triage | None:
        """What explains the failed input sets of ``program`` (``pytest_aoti_triage``)."""

    def failed(self, program: AotiProgram, error: AotiCheckError) -> str | None:
        """A check failed; the returned line (where its repro bundle is) joins the report."""

    def inferred(self, spec_text: str) -> None: ...  # dynamic_shapes="auto" inferred it

    def in_layout(self, layout: str) -> AbstractContextManager[None]:
        """Inside it, the check runs on its example relaid in ``layout`` (the ``layouts``
        option): its records name the layout."""


class CallRunner:
    """Runs the calls of one tester: the device, the registry and the session they share."""

    def __init__(
        self,
        device: torch.device,
        registry: ProgramRegistry,
        *,
        events: CheckEvents | None = None,
        hypothesis_database: Path | None = None,
        label: str = "",
        warned: set[str] | None = None,
        item: pytest.Item | None = None,
        plugin_checks: PluginChecks | None = None,
    ) -> None:
        self.device = device
        self.registry = registry
        self.events = events
        self.hypothesis_database = hypothesis_database
        self.label = label
        self.warned = warned if warned is not None else set()  # buffer mutation noted
        self.item = item
        self.plugin_checks = plugin_checks if plugin_checks is not None else PluginChecks()

    def compile(self, plan: CheckPlan) -> AotiProgram:
        """``aoti.compile``: export and compile the plan's module, no check."""
        __tracebackhide__ = True
        program = self._compile(plan)
        self._note_buffers(program, declared=None)
        if self.events is not None:
            self.events.compiled(program)
        return program

    def check(self, plan: CheckPlan, started: float) -> CheckResult:
        """Run ``plan``'s checks around its export and compile; report to the session. With
        ``layouts``, the same check then runs on a program compiled from the example relaid
        in each, and one failure says in which layouts the check failed."""
        __tracebackhide__ = True
        if isinstance(plan.dynamic_shapes, str):
            plan = replace(plan, dynamic_shapes=self._infer_dynamic_shapes(plan))
        if not plan.options.layouts:
            return self._check(plan, started)
        return self._check_in_layouts(plan, started)

    def _check_in_layouts(self, plan: CheckPlan, started: float) -> CheckResult:
        """The check in the example's own layout, then in each of ``plan``'s layouts (each a
        program of its own, cached like any); every one runs, the first failure is raised."""
        __tracebackhide__ = True
        result: CheckResult | None = None
        failures: list[tuple[str, AotiCheckError | AotiExportError | AotiCompileError]] = []
        try:
            result = self._check(plan, started)
        except AotiCheckError as error:  # export and compile errors: the same in every layout
            failures.append(("", error))
        passed = [""] if result is not None else []
        for layout in plan.options.layouts:
            relaid = relaid_plan(plan, layout)
            if relaid is None:
                self._note(
                    f"{self.label or 'a check'}: layout {layout} not compiled: no input of the "
                    f"example is {LAYOUTS[layout]}"
                )
                continue
            runner = copy.copy(self)
            runner.label = f"{self.label}[{layout}]"
            within = self.events.in_layout(layout) if self.events else contextlib.nullcontext()
            try:
                with within:
                    runner._check(relaid, time.perf_counter())
            except (AotiCheckError, AotiExportError, AotiCompileError) as error:
                failures.append((layout, error))
            else:
                passed.append(layout)
        if failures:
            first = failures[0][1]
            lead = layouts_lead([layout for layout, _ in failures], passed)
            if isinstance(first, AotiCheckError):
                finding = first.finding
                joined = f"{lead}: {finding.lead}" if finding.lead else lead
                raise first.amended(replace(finding, lead=joined)) from None
            raise type(first)(f"{lead}: {first}", stage=first.stage) from first.__cause__
        assert result is not None  # no failure: the example's own layout passed
        return result

    def _check(self, plan: CheckPlan, started: float) -> CheckResult:
        """One check of ``plan`` as it is: export, compile, the phases' checks."""
        __tracebackhide__ = True
        events = self.events
        checks = PlanRun(plan, self._context(), self.plugin_checks)
        if self._screens(plan):
            prestart_engine_child()  # it imports torch while this process exports
        try:
            program = self._compile(plan, checks=checks)
            self._note_buffers(program, declared=plan.mutated_buffers)
        except (AotiExportError, AotiCompileError, AotiCheckError) as error:
            if events is not None:
                events.not_compiled(error, time.perf_counter() - started)
            raise
        checks.compiled(program, self._triage(program, plan))
        try:
            try:
                result = checks.run_engine_checks()
            finally:
                release_engine()  # the engine child's copy of this program's weights
        except BaseException as error:
            # never published from here: its check failed (or did not finish)
            self.registry.check_failed(program)
            if not isinstance(error, AotiCheckError):
                raise
            failure = self._failed(program, error, plan, checks.context)
            if events is not None:
                events.checked(
                    program, None, failure, checks.context, time.perf_counter() - started
                )
            raise failure from None
        self.registry.check_passed(program)
        if events is not None:
            events.checked(program, result, None, checks.context, time.perf_counter() - started)
        return result

    def _compile(self, plan: CheckPlan, *, checks: PlanRun | None = None) -> AotiProgram:
        """Export and compile; ``checks`` runs the ``"eager"`` checks once the module is
        exported, then the ``"exported"`` ones, before the compile."""
        __tracebackhide__ = True
        for note in plan.notes:  # what resolving the call noted, for both kinds of call
            self._note(note)
        device_args, device_kwargs = plan.input_sets[0]
        # torch's own warnings are notes, said where this call compiled (or failed) only
        heard: list[str] = []
        loaded = False  # a program loaded or compiled earlier: its compile said them then
        try:
            digests = _digests_during_export(plan.module)
            exported = self._export(plan, heard, checks)
            if checks is not None:
                checks.run("eager")  # the weights are safe: the program writes none
            screened = checks is not None and self._screens(plan)
            child = checks is not None and self._child_screens(plan)
            with library_warnings_recorded(heard.append):
                if checks is not None:
                    checks.exported(exported)
                program = self.registry.program_for(
                    exported,
                    device=self.device,
                    inductor_configs=dict(plan.inductor_configs),
                    label=self.label,
                    # the engine child loads the package while this process stores it
                    after_compile=self._preload if child else None,
                    weight_digests=digests,
                    # a program compiled here has no kept verdicts: its first call is screened,
                    # so the child imports torch while this process compiles
                    before_compile=prestart_engine_child if child else None,
                )
            if screened and not program.seconds_compiled_here:
                self._preload(
                    program.package_path
                )  # a stored package: loaded before its first call
            loaded = program.cache_hit or program.compile_seconds == 0
        finally:  # said after the recording ends
            if not loaded:
                for text in heard:
                    self._note(text)
        if self.events is not None and program.seconds_compiled_here:
            self.events.built(program, type(plan.module).__qualname__)
        # shape messages name the user's Dims ("Dim batch"), not torch's symbols ("s77")
        program.name_dims(plan.dynamic_shapes, device_args, device_kwargs)
        return program

    def _export(self, plan: CheckPlan, heard: list[str], checks: PlanRun | None) -> ExportedProgram:
        """Export a copy sharing the module's weights; refuse a program that writes a
        Parameter. Where export fails, the ``"eager"`` checks run on a full copy first."""
        __tracebackhide__ = True
        device_args, device_kwargs = plan.input_sets[0]
        try:
            with library_warnings_recorded(heard.append):
                exported = export_module(
                    eager_copy(plan.module),
                    device_args,
                    device_kwargs,
                    dynamic_shapes=plan.dynamic_shapes,
                    options=dict(plan.export_kwargs),
                )
        except AotiExportError:
            if checks is not None:
                checks.run_on_full_copy("eager")
            raise
        finally:  # which way the module is kept unchanged, where deepcopy cannot copy it
            refusal = copy_refusal(plan.module)
            if refusal is not None:
                self._note(refusal.note())
        written = parameter_writes(exported)
        if written:
            raise parameter_write_error(written)
        return exported

    def _screens(self, plan: CheckPlan) -> bool:
        """Whether the engine child will be this check's engine (:mod:`..checks.crash_screen`):
        started before the export, the package loaded there as soon as it is written. A module
        whose weights make a package below ``SERVED_FROM_BYTES`` starts it as its compile
        starts (a compiled program's calls are screened; a warm run's kept verdicts start
        none)."""
        return (
            self._child_screens(plan) and _weight_bytes(plan.module) >= check_base.SERVED_FROM_BYTES
        )

    def _child_screens(self, plan: CheckPlan) -> bool:
        """Whether this check's calls are screened in the engine child (on a cold program)."""
        return plan.options.crash_screen and self.device.type in ("cpu", "cuda")

    def _preload(self, package: Path) -> None:
        preload_engine(package, self.device.index if self.device.type == "cuda" else None)

    def _note_buffers(self, program: AotiProgram, declared: Iterable[str] | None) -> None:
        """Say once per program that it mutates registered buffers, unless declared."""
        buffers = program.mutated_buffers
        if not buffers or program.key in self.warned:
            return
        if declared is not None and not isinstance(declared, str) and set(declared) >= buffers:
            return
        self.warned.add(program.key)
        self._note(
            f"the program mutates registered buffers {names(buffers)}: one engine shared by "
            "several threads shares this state and is not thread-safe; pass the state as an "
            "input the program mutates instead"
        )

    def _note(self, message: str) -> None:
        if self.events is not None:
            self.events.note(message)

    def _context(self) -> CheckContext:
        events = self.events
        return CheckContext(
            device=self.device,
            hypothesis_database=self.hypothesis_database,
            label=self.label,
            profile_path=events.profile_path if events is not None else lambda: None,
            attachments=self.registry,
            item=self.item,
        )

    def _triage(self, program: AotiProgram, plan: CheckPlan) -> Triage | None:
        if self.events is None:
            return None
        return self.events.triage(
            program, plan, registry=self.registry, device=self.device, label=self.label
        )

    def _failed(
        self, program: AotiProgram, error: AotiCheckError, plan: CheckPlan, context: CheckContext
    ) -> AotiCheckError:
        """Hand a failure to the session (a repro bundle), with a line saying where it is."""
        if self.events is None:
            return error
        if error.replay is None and context.triage is not None:
            # not about one input set: the bundle replays the first one
            error = context.triage.replayed(error, plan.module, plan.input_sets[0], context.calls)
        line = self.events.failed(program, error)
        if not line:
            return error
        finding = error.finding
        return error.amended(replace(finding, footer=(*finding.footer, line)))

    def _infer_dynamic_shapes(self, plan: CheckPlan) -> Any:
        """The spec ``dynamic_shapes="auto"`` stands for, inferred from the input sets."""
        __tracebackhide__ = True
        from pytest_aoti.shapes.infer import infer_dynamic_shapes  # imports torch

        spec = infer_dynamic_shapes(plan.module, plan.input_sets)
        if self.events is not None:
            self.events.inferred(format_dynamic_shapes(spec))
        return spec


def relaid_plan(plan: CheckPlan, layout: str) -> CheckPlan | None:
    """``plan`` with every input set relaid in ``layout`` and no ``layouts`` of its own; None
    where the layout changes no input of the example (there is no other program to compile)."""
    sets = [relaid_tree(input_set, layout) for input_set in plan.input_sets]
    if not sets or not sets[0][1]:
        return None
    return replace(
        plan,
        input_sets=tuple(input_set for input_set, _ in sets),
        options=replace(plan.options, layouts=()),
    )


def _digests_during_export(module: torch.nn.Module) -> WeightDigests | None:
    """The key's digests of a large module's weights, taken while it is exported; None for a
    small one (read at the key in milliseconds)."""
    if _weight_bytes(module) < DIGESTS_DURING_EXPORT_FROM:
        return None
    return WeightDigests((*module.parameters(), *module.buffers()))


def _weight_bytes(module: torch.nn.Module) -> int:
    """Bytes of the module's parameters and buffers (what its package mostly holds)."""
    return sum(tensor.nbytes for tensor in (*module.parameters(), *module.buffers()))
