"""The runner that owns one ``aoti.check`` (or ``aoti.compile``) call from eager to result.

A resolved, frozen :class:`~pytest_aoti.checks.base.CheckPlan` goes in; the runner runs the
plan's ``"eager"`` checks, exports the module, runs the ``"exported"`` checks, gets the
program from the registry (the artifact cache, or a compile), runs the ``"engine"`` checks
(:class:`~pytest_aoti.run.phases.PlanRun`), and tells the session what happened
(:class:`CheckEvents`), which also gives what explains a failure (the
``pytest_aoti_triage`` hook: the plugin's triage).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytest_aoti.checks.base import Check, CheckContext, CheckPlan, CheckResult, Triage
from pytest_aoti.checks.signature import names
from pytest_aoti.errors import (
    AotiBufferMutationWarning,
    AotiCheckError,
    AotiCompileError,
    AotiExportError,
    warn_at_caller,
)

if TYPE_CHECKING:
    import pytest
    import torch
    from torch.export import ExportedProgram

    from pytest_aoti.cache.registry import ProgramRegistry
    from pytest_aoti.compiling.program import AotiProgram
    from pytest_aoti.run.phases import PlanRun


class CheckEvents(Protocol):
    """What a runner tells its surroundings (the pytest session, for the ``aoti`` fixture)."""

    def compiled(self, program: AotiProgram) -> None:
        """``aoti.compile`` returned ``program``."""

    def not_compiled(self, error: Exception, seconds: float) -> None:
        """A check failed before it had a program: eager, export or compile failed (or
        the exported program draws random numbers)."""

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

    def profile_path(self) -> Path | None:
        """Where the next Chrome trace of the engine's calls goes; None: no trace."""

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

    def inferred(self, spec_text: str) -> None:
        """``dynamic_shapes="auto"`` inferred this spec."""


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
        added_checks: Sequence[Check] = (),
    ) -> None:
        self.device = device
        self.registry = registry
        self.events = events
        self.hypothesis_database = hypothesis_database
        self.label = label
        self.warned = warned if warned is not None else set()
        """Keys of programs whose buffer mutation was warned about (once per session)."""
        self.item = item
        self.added_checks = tuple(added_checks)
        """Checks other plugins added (the ``pytest_aoti_checks`` hook)."""

    def compile(self, plan: CheckPlan) -> AotiProgram:
        """``aoti.compile``: export and compile the plan's module, no check."""
        __tracebackhide__ = True
        program = self._compile(plan)
        self._warn_buffers(program, declared=None, threads=1)
        if self.events is not None:
            self.events.compiled(program)
        return program

    def check(self, plan: CheckPlan, started: float) -> CheckResult:
        """Run ``plan``'s checks phase by phase around the export and compile of its
        module, and report the outcome to the session."""
        __tracebackhide__ = True
        from pytest_aoti.run.phases import PlanRun

        if isinstance(plan.dynamic_shapes, str):
            plan = replace(plan, dynamic_shapes=self._infer_dynamic_shapes(plan))
        events = self.events
        checks = PlanRun(plan, self._context(), self.added_checks)
        try:
            program = self._compile(plan, checks=checks)
            self._warn_buffers(program, declared=plan.mutated_buffers, threads=plan.options.threads)
        except (AotiExportError, AotiCompileError, AotiCheckError) as error:
            if events is not None:
                events.not_compiled(error, time.perf_counter() - started)
            raise
        checks.compiled(program, self._triage(program, plan))
        try:
            result = checks.result()
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
        """Export and compile. ``checks``: the plan's run, whose ``"eager"`` checks run once
        the module is exported (see :meth:`_export`) and before anything is compiled (a
        failure there is stage ``"eager"``), then its ``"exported"`` checks."""
        __tracebackhide__ = True
        from pytest_aoti.compiling.library_warnings import library_warnings_recorded

        for note in plan.notes:  # what resolving the call noted, for both kinds of call
            self._note(note)
        device_args, device_kwargs = plan.input_sets[0]
        # torch's own warnings here are notes, once per program: said where this call
        # compiled it (or failed), not on a cached load; the user's follow the user's filters
        heard: list[str] = []
        with _said_unless_loaded(heard, self._note) as done:  # said after the recording ends
            exported = self._export(plan, heard, checks)
            if checks is not None:
                checks.run("eager")  # the weights are safe: the program writes none
            with library_warnings_recorded(heard.append):
                if checks is not None:
                    checks.exported(exported)
                program = self.registry.program_for(
                    exported,
                    device=self.device,
                    inductor_configs=dict(plan.inductor_configs),
                    label=self.label,
                )
            done(program)
        if self.events is not None and program.seconds_compiled_here:
            self.events.built(program, type(plan.module).__qualname__)
        # shape messages name the user's Dims ("Dim batch"), not torch's symbols ("s77")
        program.name_dims(plan.dynamic_shapes, device_args, device_kwargs)
        return program

    def _export(self, plan: CheckPlan, heard: list[str], checks: PlanRun | None) -> ExportedProgram:
        """Export a copy of the plan's module that shares its weights (export never changes
        the caller's module); refuse a program that writes a Parameter in place, before any
        eager call. Where export fails, the ``"eager"`` checks run on a full copy first: a
        module that fails by itself is said as such (stage ``"eager"``)."""
        __tracebackhide__ = True
        from pytest_aoti.checks.module_guard import (
            eager_copy,
            parameter_write_error,
            parameter_writes,
        )
        from pytest_aoti.compiling.library_warnings import library_warnings_recorded
        from pytest_aoti.compiling.pipeline import export_module

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
        written = parameter_writes(exported)
        if written:
            raise parameter_write_error(written)
        return exported

    def _warn_buffers(
        self, program: AotiProgram, declared: Iterable[str] | None, threads: int | None
    ) -> None:
        """Say once per program and session that it mutates registered buffers, unless the
        check declared them (``mutated_buffers=``): the user knows. A warning only where
        the test asked for ``threads=`` (what the note is about); elsewhere a note in the
        terminal summary and the JSON report, so that no strict-warning suite fails on it."""
        __tracebackhide__ = True
        buffers = program.mutated_buffers
        if not buffers or program.key in self.warned:
            return
        if declared is not None and not isinstance(declared, str) and set(declared) >= buffers:
            return
        self.warned.add(program.key)
        warning = _buffer_warning(program)
        if threads is not None and threads > 1:
            warn_at_caller(warning)
        else:
            self._note(str(warning))

    def _note(self, message: str) -> None:
        if self.events is not None:
            self.events.note(message)

    def _context(self) -> CheckContext:
        """What the checks of one call share: the device, where Hypothesis keeps failing
        shapes, the test id and item, the profile path and the registry's sidecars."""
        events = self.events
        return CheckContext(
            device=self.device,
            hypothesis_database=self.hypothesis_database,
            label=self.label,
            profile_path=events.profile_path if events is not None else lambda: None,
            sidecars=self.registry,
            item=self.item,
        )

    def _triage(self, program: AotiProgram, plan: CheckPlan) -> Triage | None:
        """What explains a failed input set of ``program`` (the session's triage)."""
        if self.events is None:
            return None
        return self.events.triage(
            program, plan, registry=self.registry, device=self.device, label=self.label
        )

    def _failed(
        self, program: AotiProgram, error: AotiCheckError, plan: CheckPlan, context: CheckContext
    ) -> AotiCheckError:
        """Hand a failure to the session (which may keep a repro bundle), then return it,
        with a line saying where the bundle is."""
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
        from pytest_aoti.shapes.formatting import format_dynamic_shapes
        from pytest_aoti.shapes.infer import infer_dynamic_shapes

        spec = infer_dynamic_shapes(plan.module, plan.input_sets)
        if self.events is not None:
            self.events.inferred(format_dynamic_shapes(spec))
        return spec


@contextlib.contextmanager
def _said_unless_loaded(
    heard: list[str], say: Callable[[str], None]
) -> Iterator[Callable[[AotiProgram], None]]:
    """Say what was ``heard`` when the block ends: all of it where it failed or its
    program was compiled by this call, nothing where the program was loaded or compiled
    earlier in the session (its compile said it then)."""
    loaded: list[bool] = []

    def done(program: AotiProgram) -> None:
        loaded.append(program.cache_hit or program.compile_seconds == 0)

    try:
        yield done
    finally:
        if not (loaded and loaded[0]):
            for text in heard:
                say(text)


def _buffer_warning(program: AotiProgram) -> AotiBufferMutationWarning:
    return AotiBufferMutationWarning(
        f"the program mutates registered buffers {names(program.mutated_buffers)}: one engine "
        "shared by several threads shares this state and is not thread-safe; pass the state "
        "as an input the program mutates instead"
    )
