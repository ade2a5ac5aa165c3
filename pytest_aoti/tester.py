"""The object behind the ``aoti`` fixture: ``compile()`` and ``check()``.

Orchestration only: a call is resolved (checked, its options layered, moved to the
device) by :func:`pytest_aoti.calls.resolve_call` before anything is exported; exporting
and compiling live in :mod:`pytest_aoti.compiling.pipeline` and
:mod:`pytest_aoti.cache.registry`; ``check()`` then runs its
:class:`~pytest_aoti.checks.base.CheckPlan`: the checks of
:data:`pytest_aoti.checks.catalog.CHECKS`, phase by phase around the export and the compile
(:mod:`pytest_aoti.checks.run`); a failure is explained by
:mod:`pytest_aoti.triage.attribution`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytest_aoti.calls import ResolvedCall, resolve_call
from pytest_aoti.checks.base import CheckContext, CheckPlan, CheckResult
from pytest_aoti.checks.signature import names
from pytest_aoti.errors import (
    AotiBufferMutationWarning,
    AotiCheckError,
    AotiCompileError,
    AotiExportError,
    user_facing,
    warn_at_caller,
)
from pytest_aoti.options.defaults import CheckDefaults

if TYPE_CHECKING:
    import torch

    from pytest_aoti.cache.registry import ProgramRegistry
    from pytest_aoti.checks.run import PlanRun
    from pytest_aoti.compiling.program import AotiProgram
    from pytest_aoti.triage.attribution import Attribution


__all__ = ["AotiTester", "CheckDefaults", "CheckEvents", "CheckResult"]

_NO_DEFAULTS = CheckDefaults()

Expected = Any  # a tensor, nested list or number; or a callable of the original inputs


class CheckEvents(Protocol):
    """What a tester tells its surroundings (the pytest session, for the ``aoti`` fixture)."""

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
        plan: CheckPlan,
        seconds: float,
    ) -> None:
        """A check ended: passed with ``result``, or failed with ``error``."""

    def profile_path(self) -> Path | None:
        """Where the next Chrome trace of the engine's calls goes; None: no trace."""

    def failed(self, program: AotiProgram, error: AotiCheckError) -> str | None:
        """A check failed; the returned line (where its repro bundle is) joins the report."""

    def inferred(self, spec_text: str) -> None:
        """``dynamic_shapes="auto"`` inferred this spec."""


class AotiTester:
    """Compiles modules to AOTInductor engines and checks them against eager PyTorch.

    Use it through the ``aoti`` fixture::

        def test_scale(aoti):
            aoti.check(Scale(), (torch.randn(4, 8),))
    """

    def __init__(
        self,
        device: torch.device,
        registry: ProgramRegistry,
        defaults: CheckDefaults = _NO_DEFAULTS,
        *,
        events: CheckEvents | None = None,
        hypothesis_database: Path | None = None,
        label: str = "",
        warned: set[str] | None = None,
    ) -> None:
        self.device = device
        """The ``torch.device`` every module and input is moved to."""
        self.defaults = defaults
        self._registry = registry
        self._events = events
        self._hypothesis_database = hypothesis_database
        self._label = label
        self._warned = warned if warned is not None else set()
        """Keys of programs whose buffer mutation was warned about (once per session)."""

    def __repr__(self) -> str:
        return f"<AotiTester device={self.device}>"

    @user_facing
    def compile(
        self,
        module: torch.nn.Module,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any] | None = None,
        *,
        dynamic_shapes: Any = None,
        strict: bool | None = None,
        inductor_configs: Mapping[str, Any] | None = None,
    ) -> AotiProgram:
        """Export, decompose and AOT-compile ``module`` for :attr:`device` and load it.

        The same program (same graph, weights, configs, device and torch) is compiled once
        per session, and once across sessions while the artifact cache holds it.
        """
        __tracebackhide__ = True
        options = {"strict": strict, "inductor_configs": inductor_configs}
        call = resolve_call(self.defaults, self.device, module, args, kwargs, options=options)
        program = self._compile(replace(call, dynamic_shapes=dynamic_shapes))
        self._warn_buffers(program, declared=None, threads=1)
        if self._events is not None:
            self._events.compiled(program)
        return program

    def _warn_buffers(
        self, program: AotiProgram, declared: Iterable[str] | None, threads: int | None
    ) -> None:
        """Say once per program and session that it mutates registered buffers, unless the
        check declared them (``mutated_buffers=``): the user knows. A warning only where
        the test asked for ``threads=`` (what the note is about); elsewhere a note in the
        terminal summary and the JSON report, so that no strict-warning suite fails on it."""
        __tracebackhide__ = True
        buffers = program.mutated_buffers
        if not buffers or program.key in self._warned:
            return
        if declared is not None and not isinstance(declared, str) and set(declared) >= buffers:
            return
        self._warned.add(program.key)
        warning = _buffer_warning(program)
        if threads is not None and threads > 1:
            warn_at_caller(warning)
        else:
            self._note(str(warning))

    def _note(self, message: str) -> None:
        if self._events is not None:
            self._events.note(message)

    def _compile(self, call: ResolvedCall, *, checks: PlanRun | None = None) -> AotiProgram:
        """Export and compile. ``checks``: a check's plan, whose ``"eager"`` checks run before
        anything is exported (a failure there is stage ``"eager"``) and whose ``"exported"``
        checks run once the program is exported, before its compile."""
        __tracebackhide__ = True
        from pytest_aoti.compiling.library_warnings import library_warnings_recorded
        from pytest_aoti.compiling.pipeline import export_module

        device_args, device_kwargs = call.input_sets[0]
        if checks is not None:
            checks.run("eager")
        # torch's own warnings here are notes; the user's code's follow the user's filters
        with library_warnings_recorded(self._note):
            exported = export_module(
                call.module,
                device_args,
                device_kwargs,
                dynamic_shapes=call.dynamic_shapes,
                options=call.export_kwargs,
            )
            if checks is not None:
                checks.exported(exported)
            program = self._registry.program_for(
                exported,
                device=self.device,
                inductor_configs=call.inductor_configs,
                label=self._label,
            )
        # shape messages name the user's Dims ("Dim batch"), not torch's symbols ("s77")
        program.name_dims(call.dynamic_shapes, device_args, device_kwargs)
        return program

    @user_facing
    def check(
        self,
        module: torch.nn.Module,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any] | None = None,
        *,
        mutates: Mapping[str, Expected] | None = None,
        mutated_buffers: Iterable[str] | None = None,
        calls: int | None = None,
        samples: Sequence[tuple[Any, ...]] | None = None,
        dynamic_shapes: Any = None,
        **options: Any,
    ) -> CheckResult:
        """Compile ``module`` and assert the engine matches eager PyTorch.

        Eager runs the example first (stage ``"eager"``), then the program is exported,
        compiled and checked: parity of every output, of every input it mutates and of every
        buffer it mutates, after each of ``calls`` calls (default one; two for a program with
        buffer state); inputs it does not mutate stay untouched; aliased examples are checked
        again as distinct tensors; with dynamic dims, boundary and ``examples`` generated
        shapes inside the exported ranges; then the deployment probes (``probes=``).

        - ``mutates={"x": expected}``: the program mutates exactly these inputs and the engine
          writes ``expected`` (or a callable of the original inputs) into the caller's tensor
          in place, after the last explicit call, else the first; ``mutates={}``: none;
        - ``mutated_buffers={"counter"}``: the program mutates exactly these buffers;
        - ``samples=[args2, ...]``: more input tuples for the same program;
        - ``dynamic_shapes``: a torch.export spec, or ``"auto"`` to infer it from the samples;
        - ``**options``: ``rtol``, ``atol``, ``strict``, ``inductor_configs`` and each field
          of :class:`~pytest_aoti.options.check_options.CheckOptions` that ``aoti.check``
          takes (``examples``, ``threads``, ``max_extra_bytes``, ``random``, ``probes``,
          ``probes_skip``; each field's help says what it does), checked before any export;
          they override the marker and the command line.

        Tensors passed in are never modified. Raises :class:`~pytest_aoti.AotiCheckError` on
        the first difference, with the stage that introduced it (``.stage``) and, for the
        compile, the first diverging graph node (``.node``).
        """
        __tracebackhide__ = True
        started = time.perf_counter()
        call = resolve_call(
            self.defaults,
            self.device,
            module,
            args,
            kwargs,
            samples=samples,
            dynamic_shapes=dynamic_shapes,
            mutates=mutates,
            mutated_buffers=mutated_buffers,
            calls=calls,
            options=options,
        )
        if isinstance(call.dynamic_shapes, str):
            call = replace(call, dynamic_shapes=self._infer_dynamic_shapes(call))
        return self._run_plan(call, _plan(call), started)

    def _run_plan(self, call: ResolvedCall, plan: CheckPlan, started: float) -> CheckResult:
        """Run ``plan``'s checks phase by phase around the export and compile of the call's
        module, and report the outcome to the session."""
        __tracebackhide__ = True
        from pytest_aoti.checks.run import PlanRun

        events = self._events
        checks = PlanRun(plan, self._context())
        try:
            program = self._compile(call, checks=checks)
            self._warn_buffers(program, declared=plan.mutated_buffers, threads=plan.options.threads)
        except (AotiExportError, AotiCompileError, AotiCheckError) as error:
            if events is not None:
                events.not_compiled(error, time.perf_counter() - started)
            raise
        checks.compiled(program, self._triage(program, plan), call.calls)
        try:
            result = checks.result()
        except BaseException as error:
            # never published from here: its check failed (or did not finish)
            self._registry.check_failed(program)
            if not isinstance(error, AotiCheckError):
                raise
            failure = self._failed(program, error, plan)
            if events is not None:
                events.checked(program, None, failure, plan, time.perf_counter() - started)
            raise failure from None
        self._registry.check_passed(program)
        if events is not None:
            events.checked(program, result, None, plan, time.perf_counter() - started)
        return result

    def _context(self) -> CheckContext:
        """What the checks of one call share: the device, where Hypothesis keeps failing
        shapes, the test id, the profile path and the registry's sidecars."""
        events = self._events
        return CheckContext(
            device=self.device,
            hypothesis_database=self._hypothesis_database,
            label=self._label,
            profile_path=events.profile_path if events is not None else lambda: None,
            sidecars=self._registry,
        )

    def _triage(self, program: AotiProgram, plan: CheckPlan) -> Attribution:
        """What explains a failed input set of ``program``: stage attribution and, with
        ``localize``, the first diverging node (one instrumented compile, when needed)."""
        from pytest_aoti.triage.attribution import Attribution, compiling_localizer

        localizer = None
        if plan.options.localize:
            localizer = compiling_localizer(
                program,
                self._registry,
                device=self.device,
                tolerance=plan.tolerance,
                configs=plan.inductor_configs,
                label=self._label,
            )
        return Attribution(localizer)

    def _failed(
        self, program: AotiProgram, error: AotiCheckError, plan: CheckPlan
    ) -> AotiCheckError:
        """Hand a failure to the session (which may keep a repro bundle), then return it,
        with a line saying where the bundle is."""
        if self._events is None:
            return error
        if error.replay is None:  # not about one input set: replay the first one
            from pytest_aoti.triage.attribution import Replay

            error.replay = Replay(plan.module, *plan.input_sets[0], plan.calls)
        line = self._events.failed(program, error)
        if not line:
            return error
        finding = error.finding
        return error.amended(replace(finding, footer=(*finding.footer, line)))

    def _infer_dynamic_shapes(self, call: ResolvedCall) -> Any:
        """The spec ``dynamic_shapes="auto"`` stands for, inferred from the input sets."""
        __tracebackhide__ = True
        from pytest_aoti.shapes.formatting import format_dynamic_shapes
        from pytest_aoti.shapes.infer import infer_dynamic_shapes

        spec = infer_dynamic_shapes(call.module, call.input_sets)
        if self._events is not None:
            self._events.inferred(format_dynamic_shapes(spec))
        return spec


def _plan(call: ResolvedCall) -> CheckPlan:
    """What the checks read of a resolved call; the calls per input set are set once the
    program is compiled (:meth:`~pytest_aoti.checks.run.PlanRun.compiled`)."""
    return CheckPlan(
        module=call.module,
        input_sets=call.input_sets,
        tolerance=call.tolerance,
        calls=call.calls if call.calls is not None else 1,
        mutates=call.mutates,
        mutated_buffers=call.mutated_buffers,
        expect_at=call.expect_at,
        dynamic_shapes=call.dynamic_shapes,
        inductor_configs=call.inductor_configs,
        options=call.options,
    )


def _buffer_warning(program: AotiProgram) -> AotiBufferMutationWarning:
    return AotiBufferMutationWarning(
        f"the program mutates registered buffers {names(program.mutated_buffers)}: one engine "
        "shared by several threads shares this state and is not thread-safe; pass the state "
        "as an input the program mutates instead"
    )
