"""The object behind the ``aoti`` fixture: ``compile()`` and ``check()``.

Orchestration only: exporting and compiling live in :mod:`pytest_aoti.compiling.pipeline` and
:mod:`pytest_aoti.compiling.registry`; ``check()`` resolves its arguments and options into a
:class:`~pytest_aoti.checks.base.CheckPlan` and runs the checks of
:data:`pytest_aoti.checks.catalog.CHECKS` in order; a failure is explained by
:mod:`pytest_aoti.triage.attribution`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytest_aoti.calls import (
    check_declarations,
    check_module_and_inputs,
    check_not_meta,
    checked_samples,
    keyword_values,
)
from pytest_aoti.checks.base import CheckPlan, CheckResult
from pytest_aoti.checks.declared import names
from pytest_aoti.checks.defaults import CheckDefaults
from pytest_aoti.errors import (
    AotiBufferMutationWarning,
    AotiCheckError,
    AotiCompileError,
    AotiExportError,
    AotiUsageError,
    user_facing,
    warn_at_caller,
)
from pytest_aoti.settings import option_problem

if TYPE_CHECKING:
    import torch

    from pytest_aoti.compiling.program import AotiProgram
    from pytest_aoti.compiling.randomness import RandomOp
    from pytest_aoti.compiling.registry import ProgramRegistry
    from pytest_aoti.tolerance import LeafStats


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
        program = self._compile(module, args, kwargs, dynamic_shapes, strict, inductor_configs)
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

    def _compile(
        self,
        module: torch.nn.Module,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any] | None,
        dynamic_shapes: Any,
        strict: bool | None,
        inductor_configs: Mapping[str, Any] | None,
        random_mode: str = "",
        *,
        eager_first: bool = False,
    ) -> AotiProgram:
        """Export and compile. ``eager_first``: eager PyTorch runs the example before
        anything is exported (a failure there is stage ``"eager"``); ``random_mode="fail"``:
        a program that draws random numbers fails once exported, before its compile."""
        __tracebackhide__ = True
        from pytest_aoti.compiling.configs import check_inductor_configs
        from pytest_aoti.compiling.library_warnings import library_warnings_recorded
        from pytest_aoti.compiling.pipeline import export_module

        check_module_and_inputs(module, args, kwargs)
        if option_problem("strict", strict):
            raise AotiUsageError(option_problem("strict", strict))
        settings = self.defaults.overridden(inductor_configs=inductor_configs)
        check_inductor_configs(settings.inductor_configs)
        device_module = self._module_on_device(module)
        device_args, device_kwargs = self._inputs_on_device(args, kwargs or {})
        if eager_first:
            from pytest_aoti.checks.eager import run_eager_first

            run_eager_first(device_module, device_args, device_kwargs)
        # torch's own warnings here are notes; the user's code's follow the user's filters
        with library_warnings_recorded(self._note):
            exported = export_module(
                device_module,
                device_args,
                device_kwargs,
                dynamic_shapes=dynamic_shapes,
                options=self.defaults.export_kwargs(strict),
            )
            if random_mode == "fail":
                from pytest_aoti.checks.randomness import assert_not_random

                assert_not_random(exported)
            program = self._registry.program_for(
                exported,
                device=self.device,
                inductor_configs=settings.inductor_configs,
                label=self._label,
            )
        # shape messages name the user's Dims ("Dim batch"), not torch's symbols ("s77")
        program.name_dims(dynamic_shapes, device_args, device_kwargs)
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
        examples: int | None = None,
        rtol: float | None = None,
        atol: float | None = None,
        strict: bool | None = None,
        inductor_configs: Mapping[str, Any] | None = None,
        dynamic_shapes: Any = None,
        threads: int | None = None,
        max_extra_bytes: int | None = None,
        random: str | None = None,
        probes: str | None = None,
        probes_skip: Any = None,
        **options: Any,
    ) -> CheckResult:
        """Compile ``module`` and assert the engine matches eager PyTorch.

        - parity of every output and of every input the program mutates, after each of
          ``calls`` calls; inputs the program does not mutate must stay untouched. By
          default one call, two for a program that mutates registered buffers (their
          state carries from call to call);
        - every buffer and input that eager changes is one the program records as mutated;
        - example inputs that share storage are checked again as distinct tensors;
        - ``mutates={"x": expected}``: the program mutates exactly these inputs and the engine
          writes ``expected`` into the caller's tensor in place (checked after the last of an
          explicit ``calls``, else after the first call; ``expected`` may be a callable of the
          original inputs); ``mutates={}``: none;
        - ``mutated_buffers={"counter"}``: the program mutates exactly these buffers;
        - ``samples=[args2, ...]``: more input tuples for the same program (with
          ``dynamic_shapes``), each checked the same way;
        - ``dynamic_shapes``: a torch.export spec, or ``"auto"`` to infer one from ``args``
          and ``samples``; with dynamic dims, ``examples`` generated input sets inside the
          exported ranges are checked too;
        - ``threads=K``: one engine serves K threads at once, each on inputs of its own, and
          every thread's results match eager; a program that mutates registered buffers
          fails (their state is shared by the threads);
        - ``max_extra_bytes=N``: no engine call of the example allocates more than N bytes
          of device memory beyond what was allocated before it (outputs included), e.g.
          no copy of a cache it updates in place. Measured on CUDA; on the CPU it is not
          measured (``CheckResult.extra_bytes`` is None, the terminal summary says so);
        - ``random="shapes"``: for a program that draws random numbers (which fails the
          check by default, as eager and the engine draw different ones), compare only the
          output structure, shapes and dtypes, and the values of outputs no random op feeds;
        - ``probes="report"`` (the default, or ``--aoti-probes``): once the check passed, the
          raw engine is called with variants of the example (other layouts, sizes, dtypes,
          devices, scalar values, aliased inputs) and the hazards are reported
          (``CheckResult.probes``); ``probes="fail"`` fails the check where the engine
          silently differs from eager on a variant the exported program accepts (with
          ``--aoti-serving-checks``, not on one ``AOTI_RUNTIME_CHECK_INPUTS=1`` refuses);
          ``probes="off"`` runs none. ``probes_skip={"x": {"channels_last"}}`` (or a set for
          every input) leaves out variants the model deliberately does not support;
        - ``**options``: any other per-check option of :data:`pytest_aoti.settings.OPTIONS`
          (a row with ``keyword=True``), by name.

        Eager PyTorch runs the example first: a module that fails by itself fails the
        check at once (stage ``"eager"``), before any export or compile.

        Tensors passed in are never modified: eager and engine each run on their own clones.
        Raises :class:`~pytest_aoti.AotiCheckError` on the first difference, with the
        stage that introduced it (``.stage``) and, for the compile, the first diverging
        graph node (``.node``).
        """
        __tracebackhide__ = True

        started = time.perf_counter()
        check_module_and_inputs(module, args, kwargs)
        kwargs = dict(kwargs or {})
        samples = checked_samples(samples, dynamic_shapes)
        for sample in samples:
            check_not_meta(module, sample, None)
        check_declarations(mutates, mutated_buffers)
        if calls is not None and (
            not isinstance(calls, int) or isinstance(calls, bool) or calls < 1
        ):
            raise AotiUsageError(f"calls must be a positive int, got {calls!r}")
        settings = self.defaults.overridden(
            **keyword_values(
                {
                    "examples": examples,
                    "threads": threads,
                    "max_extra_bytes": max_extra_bytes,
                    "random": random,
                    "probes": probes,
                    "probes_skip": probes_skip,
                },
                options,
            )
        )
        tolerance = self.defaults.tolerance(rtol, atol)

        if isinstance(dynamic_shapes, str):
            dynamic_shapes = self._infer_dynamic_shapes(
                dynamic_shapes, module, args, kwargs, samples
            )
        try:
            program = self._compile(
                module,
                args,
                kwargs,
                dynamic_shapes,
                strict,
                inductor_configs,
                settings.random,
                eager_first=True,
            )
            self._warn_buffers(program, declared=mutated_buffers, threads=settings.threads)
        except (AotiExportError, AotiCompileError, AotiCheckError) as error:
            if self._events is not None:
                self._events.not_compiled(error, time.perf_counter() - started)
            raise
        # a program with buffer state is wrong only from its second call on when the
        # engine drops that state (pytorch/pytorch#165444): check two calls by default
        run_calls = calls if calls is not None else (2 if program.mutated_buffers else 1)
        plan = CheckPlan(
            module=self._module_on_device(module),
            input_sets=[self._inputs_on_device(set_args, kwargs) for set_args in (args, *samples)],
            tolerance=tolerance,
            calls=run_calls,
            mutates=mutates,
            mutated_buffers=mutated_buffers,
            expect_at=calls if calls is not None else 1,
            dynamic_shapes=dynamic_shapes,
            inductor_configs=self.defaults.overridden(
                inductor_configs=inductor_configs
            ).inductor_configs,
            options=settings.option_values(),
            random_ops=_random_ops(program),
        )
        try:
            result = self._run_checks(program, plan)
        except BaseException as error:
            # never published from here: its check failed (or did not finish)
            self._registry.check_failed(program)
            if not isinstance(error, AotiCheckError):
                raise
            failure = self._failed(program, error, plan)
            if self._events is not None:
                self._events.checked(program, None, failure, plan, time.perf_counter() - started)
            raise failure from None
        self._registry.check_passed(program)
        if self._events is not None:
            self._events.checked(program, result, None, plan, time.perf_counter() - started)
        return result

    def _run_checks(self, program: AotiProgram, plan: CheckPlan) -> CheckResult:
        """Every check of :data:`~pytest_aoti.checks.catalog.CHECKS` that applies, in order."""
        __tracebackhide__ = True
        from pytest_aoti.checks import catalog
        from pytest_aoti.checks.base import CheckContext
        from pytest_aoti.triage.attribution import Attribution, compiling_localizer

        localizer = None
        if plan.localize:
            localizer = compiling_localizer(
                program,
                self._registry,
                device=self.device,
                tolerance=plan.tolerance,
                configs=plan.inductor_configs,
                label=self._label,
            )
        events = self._events
        context = CheckContext(
            device=self.device,
            triage=Attribution(localizer),
            hypothesis_database=self._hypothesis_database,
            label=self._label,
            profile_path=events.profile_path if events is not None else lambda: None,
            sidecars=self._registry,
        )
        stats: list[tuple[str, LeafStats]] = []
        input_sets = 0
        figures: dict[str, Any] = {}
        ran: list[str] = []
        for check in catalog.CHECKS:
            if not check.applies(plan):
                continue
            outcome = check.run(program, plan, context)
            ran.append(check.name)
            stats += outcome.stats
            input_sets += outcome.input_sets
            figures.update(outcome.figures)
        return CheckResult(
            program=program,
            stats=tuple(stats),
            dynamic_shapes=plan.dynamic_shapes,
            input_sets=input_sets,
            figures=figures,
            checks=tuple(ran),
        )

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

    def _infer_dynamic_shapes(
        self,
        mode: str,
        module: torch.nn.Module,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        samples: Sequence[tuple[Any, ...]],
    ) -> Any:
        __tracebackhide__ = True
        from pytest_aoti.shapes import format_dynamic_shapes, infer_dynamic_shapes

        if mode != "auto":
            raise AotiUsageError(
                f'dynamic_shapes must be a torch.export spec or "auto", got {mode!r}'
            )
        if not samples:
            raise AotiUsageError(
                'dynamic_shapes="auto" needs samples=[...]: input sets of other sizes to infer from'
            )
        spec = infer_dynamic_shapes(
            module, [(args, dict(kwargs))] + [(s, dict(kwargs)) for s in samples]
        )
        if self._events is not None:
            self._events.inferred(format_dynamic_shapes(spec))
        return spec

    def _module_on_device(self, module: torch.nn.Module) -> torch.nn.Module:
        """The module on :attr:`device`; a moved copy, so the caller's module is untouched."""
        tensors = [*module.parameters(), *module.buffers()]
        if all(
            tensor.device == self.device or _same_device(tensor.device, self.device)
            for tensor in tensors
        ):
            return module
        return copy.deepcopy(module).to(self.device)

    def _inputs_on_device(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        import torch
        import torch.utils._pytree as pytree

        def move(leaf: Any) -> Any:
            if isinstance(leaf, torch.Tensor) and not _same_device(leaf.device, self.device):
                return leaf.to(self.device)
            return leaf

        moved_args, moved_kwargs = pytree.tree_map(move, (tuple(args), dict(kwargs)))
        return tuple(moved_args), moved_kwargs


def _same_device(actual: torch.device, wanted: torch.device) -> bool:
    if actual.type != wanted.type:
        return False
    if wanted.type != "cuda":
        return True
    import torch

    wanted_index = wanted.index if wanted.index is not None else torch.cuda.current_device()
    return actual.index == wanted_index


def _random_ops(program: AotiProgram) -> tuple[RandomOp, ...]:
    """The random operations of the exported graph (the same on a cache hit)."""
    from pytest_aoti.compiling.randomness import random_ops

    return tuple(random_ops(program.exported))


def _buffer_warning(program: AotiProgram) -> AotiBufferMutationWarning:
    return AotiBufferMutationWarning(
        f"the program mutates registered buffers {names(program.mutated_buffers)}: one engine "
        "shared by several threads shares this state and is not thread-safe; pass the state "
        "as an input the program mutates instead"
    )
