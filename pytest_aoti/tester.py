"""The object behind the ``aoti`` fixture: ``compile()`` and ``check()``.

Orchestration only: exporting and compiling live in :mod:`pytest_aoti.compiling.pipeline` and
:mod:`pytest_aoti.compiling.registry`, judging numbers in :mod:`pytest_aoti.compare`, running one
input set in :mod:`pytest_aoti.checks.parity`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytest_aoti.errors import (
    AotiBufferMutationWarning,
    AotiCheckError,
    AotiCompileError,
    AotiExportError,
    AotiUsageError,
    user_facing,
    warn_at_caller,
)
from pytest_aoti.settings import DEFAULT_EXAMPLES, DEFAULT_MAX_DIM

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram

    from pytest_aoti.checks.memory import PeakMemory
    from pytest_aoti.checks.parity import Localizer
    from pytest_aoti.checks.probes import ProbeReport
    from pytest_aoti.compare import LeafStats, Tolerance, ToleranceHook
    from pytest_aoti.compiling.program import AotiProgram
    from pytest_aoti.compiling.registry import ProgramRegistry


@dataclass(frozen=True)
class CheckDefaults:
    """Defaults a check falls back to: the options (command line, ini file), the hooks and
    the marker. Every field but ``base_*``, ``tolerance_hook`` and ``export_options`` is
    also a ``@pytest.mark.aoti`` option (see :data:`MARKER_OPTIONS`)."""

    rtol: float | None = None
    """Set by the marker; final (above the tolerance hook and ``--aoti-rtol``)."""
    atol: float | None = None
    strict: bool | None = None
    inductor_configs: Mapping[str, Any] = field(default_factory=dict)
    examples: int = DEFAULT_EXAMPLES
    max_dim: int = DEFAULT_MAX_DIM
    localize: bool = True
    """Name the first diverging node when the AOTI compile broke a check (one extra compile)."""
    probes: str = "report"
    """Deployment probes after a passing check: ``off``, ``report`` or ``fail``."""
    probes_skip: Any = None
    """Probe variants a model does not support: ``{"channels_last"}`` or ``{"x": {"size"}}``."""
    base_rtol: float | None = None
    """``--aoti-rtol`` / ini: below the marker, the call and the tolerance hook."""
    base_atol: float | None = None
    tolerance_hook: ToleranceHook | None = field(default=None, compare=False)
    """The ``pytest_aoti_tolerance`` hook, asked per compared leaf."""
    export_options: Mapping[str, Any] = field(default_factory=dict)
    """``torch.export.export`` keyword arguments from the ``pytest_aoti_export_options``
    hook and the ``--aoti-export`` variant, below the marker's and the call's ``strict``."""

    def overridden(self, **values: Any) -> CheckDefaults:
        """A copy with every non-None value of ``values`` applied (configs are merged)."""
        values = {name: value for name, value in values.items() if value is not None}
        for name in ("inductor_configs", "export_options"):
            if name in values:
                values[name] = {**getattr(self, name), **values[name]}
        return replace(self, **values)

    def tolerance(self, rtol: float | None, atol: float | None) -> Tolerance:
        """The layered tolerance of a check whose call passed ``rtol`` / ``atol``."""
        from pytest_aoti.compare import Tolerance

        return Tolerance(
            rtol=self.rtol if rtol is None else rtol,
            atol=self.atol if atol is None else atol,
            hook=self.tolerance_hook,
            base_rtol=self.base_rtol,
            base_atol=self.base_atol,
        )

    def export_kwargs(self, strict: bool | None) -> dict[str, Any]:
        """Export options: the hook's and the variant's, then the marker's and the call's
        ``strict``."""
        options = dict(self.export_options)
        chosen = strict if strict is not None else self.strict
        if chosen is not None:
            options["strict"] = chosen
        return options


MARKER_OPTIONS = (
    "rtol",
    "atol",
    "strict",
    "inductor_configs",
    "examples",
    "max_dim",
    "localize",
    "probes",
    "probes_skip",
)
"""Options of ``@pytest.mark.aoti``: the ``CheckDefaults`` fields a marker may set."""


@dataclass(frozen=True)
class CheckResult:
    """What :meth:`AotiTester.check` compared, with the largest errors it measured."""

    program: AotiProgram
    stats: tuple[tuple[str, LeafStats], ...]
    """``(context, stats)`` for every compared output and input leaf, e.g.
    ``("call 2, sample 1", LeafStats(location="output[0]", ...))``."""
    dynamic_shapes: Any = None
    """The ``dynamic_shapes`` spec the program was exported with (inferred for ``"auto"``)."""
    examples: int = 0
    """How many generated input sets were checked."""
    input_sets: int = 1
    """How many input sets were checked in all: the example, samples, distinct copies of
    aliased inputs, boundary and generated shapes."""
    extra_bytes: int | None = None
    """With ``max_extra_bytes``: the most device memory one engine call allocated beyond
    what was allocated before it; None where it is not measured (the CPU)."""
    probes: ProbeReport | None = None
    """The deployment probes of the program (None with ``probes="off"``)."""

    @property
    def max_errors(self) -> dict[str, tuple[float, float]]:
        """Largest ``(max_abs, max_rel)`` per output or input location over all calls."""
        worst: dict[str, tuple[float, float]] = {}
        for _, leaf in self.stats:
            abs_err, rel_err = worst.get(leaf.location, (0.0, 0.0))
            worst[leaf.location] = (max(abs_err, leaf.max_abs), max(rel_err, leaf.max_rel))
        return worst

    @property
    def max_abs(self) -> float:
        return max((leaf.max_abs for _, leaf in self.stats), default=0.0)

    @property
    def max_rel(self) -> float:
        return max((leaf.max_rel for _, leaf in self.stats), default=0.0)


Expected = Any  # a tensor, nested list or number; or a callable of the original inputs


@dataclass
class _CheckPlan:
    """What one ``check`` call runs, once its arguments are resolved."""

    module: torch.nn.Module
    """The module on the tester's device."""
    input_sets: list[tuple[tuple[Any, ...], dict[str, Any]]]
    """The example and the samples, on the tester's device."""
    mutates: Mapping[str, Any] | None
    calls: int
    expect_at: int
    """The call after which ``mutates`` values are checked."""
    tolerance: Tolerance
    examples: int
    """Generated input sets (0 without dynamic dims)."""
    max_dim: int
    threads: int = 1
    """Threads one engine serves at once in the thread-safety check (1: no such check)."""
    max_extra_bytes: int | None = None
    inductor_configs: Mapping[str, Any] = field(default_factory=dict)
    """The configs the program was compiled with, for the localizer's compile."""
    engine: Any = None
    """The engine of the first input set's run, kept for timing: loading another one for a
    program with buffer state would map the package again, for good."""
    probes: ProbeReport | None = None
    """The deployment probes run after the check passed."""


class CheckEvents(Protocol):
    """What a tester tells its surroundings (the pytest session, for the ``aoti`` fixture)."""

    def compiled(self, program: AotiProgram) -> None:
        """``aoti.compile`` returned ``program``."""

    def not_compiled(self, error: Exception, seconds: float) -> None:
        """A check failed before it had a program: export or compile failed."""

    def checked(
        self,
        program: AotiProgram,
        result: CheckResult | None,
        error: AotiCheckError | None,
        plan: _CheckPlan,
        seconds: float,
    ) -> None:
        """A check ended: passed with ``result``, or failed with ``error``."""

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
        defaults: CheckDefaults = CheckDefaults(),
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
        self._warn_buffers(program, declared=None)
        if self._events is not None:
            self._events.compiled(program)
        return program

    def _warn_buffers(self, program: AotiProgram, declared: Iterable[str] | None) -> None:
        """Warn once per program and session that it mutates registered buffers, unless
        the check declared them (``mutated_buffers=``): the user knows, and ``threads=``
        checks what it means."""
        __tracebackhide__ = True
        buffers = program.mutated_buffers
        if not buffers or program.key in self._warned:
            return
        if declared is not None and not isinstance(declared, str) and set(declared) >= buffers:
            return
        self._warned.add(program.key)
        warn_at_caller(_buffer_warning(program))

    def _compile(
        self,
        module: torch.nn.Module,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any] | None,
        dynamic_shapes: Any,
        strict: bool | None,
        inductor_configs: Mapping[str, Any] | None,
    ) -> AotiProgram:
        __tracebackhide__ = True
        from pytest_aoti.compiling.pipeline import export_module

        _check_module_and_inputs(module, args, kwargs)
        settings = self.defaults.overridden(inductor_configs=inductor_configs)
        device_module = self._module_on_device(module)
        device_args, device_kwargs = self._inputs_on_device(args, kwargs or {})
        exported = export_module(
            device_module,
            device_args,
            device_kwargs,
            dynamic_shapes=dynamic_shapes,
            options=self.defaults.export_kwargs(strict),
        )
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
        probes: str | None = None,
        probes_skip: Any = None,
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
        - ``probes="report"`` (the default, or ``--aoti-probes``): once the check passed, the
          raw engine is called with variants of the example (other layouts, sizes, dtypes,
          devices, scalar values, aliased inputs) and the hazards are reported;
          ``probes="fail"`` fails the check where the engine silently differs from eager on
          a variant the exported program accepts; ``probes="off"`` runs none.
          ``probes_skip={"x": {"channels_last"}}`` (or a set for every input) leaves out
          variants the model deliberately does not support.

        Tensors passed in are never modified: eager and engine each run on their own clones.
        Raises :class:`~pytest_aoti.AotiCheckError` on the first difference, with the
        stage that introduced it (``.stage``) and, for the compile, the first diverging
        graph node (``.node``).
        """
        __tracebackhide__ = True

        started = time.perf_counter()
        _check_module_and_inputs(module, args, kwargs)
        kwargs = dict(kwargs or {})
        samples = _checked_samples(samples, dynamic_shapes)
        if calls is not None and (
            not isinstance(calls, int) or isinstance(calls, bool) or calls < 1
        ):
            raise AotiUsageError(f"calls must be a positive int, got {calls!r}")
        if threads is not None and (
            not isinstance(threads, int) or isinstance(threads, bool) or threads < 1
        ):
            raise AotiUsageError(f"threads must be a positive int, got {threads!r}")
        if max_extra_bytes is not None and (
            not isinstance(max_extra_bytes, int)
            or isinstance(max_extra_bytes, bool)
            or max_extra_bytes < 0
        ):
            raise AotiUsageError(
                f"max_extra_bytes must be a number of bytes (an int >= 0), got {max_extra_bytes!r}"
            )
        settings = self.defaults.overridden(examples=examples)
        tolerance = self.defaults.tolerance(rtol, atol)
        from pytest_aoti.checks.probes import check_policy, check_skip

        probe_policy = check_policy(probes if probes is not None else self.defaults.probes)
        probe_skip = check_skip(
            probes_skip if probes_skip is not None else self.defaults.probes_skip
        )

        if isinstance(dynamic_shapes, str):
            dynamic_shapes = self._infer_dynamic_shapes(
                dynamic_shapes, module, args, kwargs, samples
            )
        try:
            program = self._compile(module, args, kwargs, dynamic_shapes, strict, inductor_configs)
            self._warn_buffers(program, declared=mutated_buffers)
        except (AotiExportError, AotiCompileError) as error:
            if self._events is not None:
                self._events.not_compiled(error, time.perf_counter() - started)
            raise
        # a program with buffer state is wrong only from its second call on when the
        # engine drops that state (pytorch/pytorch#165444): check two calls by default
        run_calls = calls if calls is not None else (2 if program.mutated_buffers else 1)
        plan = _CheckPlan(
            module=self._module_on_device(module),
            input_sets=[self._inputs_on_device(set_args, kwargs) for set_args in (args, *samples)],
            mutates=mutates,
            calls=run_calls,
            expect_at=calls if calls is not None else 1,
            tolerance=tolerance,
            examples=settings.examples if dynamic_shapes is not None else 0,
            max_dim=settings.max_dim,
            threads=threads or 1,
            max_extra_bytes=max_extra_bytes,
            inductor_configs=self.defaults.overridden(
                inductor_configs=inductor_configs
            ).inductor_configs,
        )
        try:
            _assert_signature(program, mutates, mutated_buffers)
            result = self._run_plan(program, plan, dynamic_shapes)
            if probe_policy != "off":
                result = self._probe(program, plan, result, probe_policy, probe_skip)
        except AotiCheckError as error:
            failure = self._failed(program, error, plan)
            if self._events is not None:
                self._events.checked(program, None, failure, plan, time.perf_counter() - started)
            raise failure from None
        if self._events is not None:
            self._events.checked(program, result, None, plan, time.perf_counter() - started)
        return result

    def _run_plan(self, program: AotiProgram, plan: _CheckPlan, dynamic_shapes: Any) -> CheckResult:
        """Every input set of the plan, distinct copies of aliased ones, generated shapes."""
        __tracebackhide__ = True
        from pytest_aoti.checks.memory import PeakMemory
        from pytest_aoti.checks.parity import InputRun

        localizer = self._localizer(program, plan.tolerance, plan.inductor_configs)
        memory = PeakMemory(self.device) if plan.max_extra_bytes is not None else None
        stats: list[tuple[str, LeafStats]] = []
        input_sets = 0
        for index, (device_args, device_kwargs) in enumerate(plan.input_sets):
            label = f"sample {index}" if len(plan.input_sets) > 1 else ""
            run = InputRun(
                program,
                plan.module,
                device_args,
                device_kwargs,
                tolerance=plan.tolerance,
                label=label,
                localizer=localizer,
                memory=memory if index == 0 else None,
            )
            stats += run.check(
                plan.calls, plan.mutates, values_too=index == 0, expect_at=plan.expect_at
            )
            if index == 0 and memory is not None:
                _assert_extra_bytes(memory, plan, program)
            plan.engine = plan.engine or run.engine
            distinct = self._check_distinct(
                program, plan, device_args, device_kwargs, label, localizer
            )
            input_sets += 1 + bool(distinct)
            stats += distinct

        if plan.threads > 1:
            from pytest_aoti.checks.threads import check_threads

            stats += check_threads(
                program,
                plan.module,
                *plan.input_sets[0],
                threads=plan.threads,
                calls=plan.calls,
                tolerance=plan.tolerance,
            )

        generated = 0
        if plan.examples:
            from pytest_aoti.checks.generated import Generation, check_generated

            generated, generated_stats = check_generated(
                program,
                plan.module,
                plan.input_sets[0],
                calls=plan.calls,
                mutates=plan.mutates,
                tolerance=plan.tolerance,
                generation=Generation(
                    examples=plan.examples,
                    max_dim=plan.max_dim,
                    database=self._hypothesis_database,
                    label=self._label,
                ),
                localizer=localizer,
            )
            stats += generated_stats
        return CheckResult(
            program=program,
            stats=tuple(stats),
            dynamic_shapes=dynamic_shapes,
            examples=generated,
            input_sets=input_sets + generated,
            extra_bytes=memory.peak_bytes if memory is not None and memory.measured else None,
        )

    def _probe(
        self,
        program: AotiProgram,
        plan: _CheckPlan,
        result: CheckResult,
        policy: str,
        skip: Mapping[str, frozenset[str]],
    ) -> CheckResult:
        """Deployment probes of a passed check; under ``fail`` a wrong variant raises."""
        __tracebackhide__ = True
        from pytest_aoti.checks.probes import probe_failure, run_probes

        report, variants = run_probes(
            program,
            plan.module,
            *plan.input_sets[0],
            tolerance=plan.tolerance,
            skip=skip,
            cache=self._registry,
        )
        plan.probes = report
        if policy == "fail" and report.wrong:
            raise probe_failure(report, variants, plan.module)
        return replace(result, probes=report)

    def _failed(
        self, program: AotiProgram, error: AotiCheckError, plan: _CheckPlan
    ) -> AotiCheckError:
        """Hand a failure to the session (which may keep a repro bundle), then return it,
        with a line saying where the bundle is."""
        if self._events is None:
            return error
        if error.replay is None:  # not about one input set: replay the first one
            from pytest_aoti.checks.parity import Replay

            error.replay = Replay(plan.module, *plan.input_sets[0], plan.calls)
        line = self._events.failed(program, error)
        if not line:
            return error
        from dataclasses import replace as replace_fields

        finding = error.finding
        return error.amended(replace_fields(finding, footer=(*finding.footer, line)))

    def _check_distinct(
        self,
        program: AotiProgram,
        plan: _CheckPlan,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        label: str,
        localizer: Localizer | None,
    ) -> list[tuple[str, LeafStats]]:
        """Check again on distinct inputs where example inputs share storage.

        Expected ``mutates`` values describe the given inputs, so only parity is checked.
        """
        __tracebackhide__ = True
        from dataclasses import replace as replace_fields

        from pytest_aoti.checks.aliasing import aliased_inputs, distinct_inputs
        from pytest_aoti.checks.parity import InputRun

        aliased = aliased_inputs(program.exported, args, kwargs)
        if not aliased:
            return []
        described = "; ".join(", ".join(group) for group in aliased)
        run = InputRun(
            program,
            plan.module,
            *distinct_inputs(program.exported, args, kwargs, aliased),
            tolerance=plan.tolerance,
            label=", ".join(filter(None, [label, "distinct copies of the aliased inputs"])),
            localizer=localizer,
        )
        try:
            return run.check(plan.calls, None, values_too=False)
        except AotiCheckError as error:
            finding = error.finding
            raise error.amended(
                replace_fields(
                    finding,
                    kind="aliasing",
                    lead=f"aliased example inputs ({described} share storage)",
                    notes=(
                        *finding.notes,
                        "torch.export specializes a program on aliasing among its example "
                        "inputs, without a guard (pytorch/pytorch#139805; a mutated input that "
                        "aliases another: #139789): the program is right only for callers "
                        "that pass the same aliasing",
                        "export with distinct example tensors (e.g. y=x.clone()) unless every "
                        "caller passes these inputs aliased",
                    ),
                    extra={**finding.extra, "aliased": aliased},
                )
            ) from None

    def _localizer(
        self,
        program: AotiProgram,
        tolerance: Tolerance,
        configs: Mapping[str, Any],
    ) -> Localizer | None:
        """What names the first diverging node of a check the AOTI compile broke: one
        instrumented compile, through the registry like any program."""
        if not self.defaults.localize:
            return None

        def localize_failure(args: tuple[Any, ...], kwargs: dict[str, Any], calls: int) -> Any:
            from pytest_aoti.triage.localize import localize

            def compile_engine(exported: ExportedProgram) -> Any:
                instrumented = self._registry.program_for(
                    exported,
                    device=self.device,
                    inductor_configs=configs,
                    label=f"{self._label} (instrumented to find the diverging node)",
                )
                return instrumented.engine_in_exported_state()

            return localize(
                program.decomposed,
                args,
                kwargs,
                compile_engine=compile_engine,
                tolerance=tolerance,
                calls=calls,
            )

        return localize_failure

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


def _check_module_and_inputs(module: Any, args: Any, kwargs: Any) -> None:
    __tracebackhide__ = True
    import torch

    if not isinstance(module, torch.nn.Module):
        raise AotiUsageError(
            f"module must be a torch.nn.Module, got {type(module).__name__}; "
            "wrap a function in a Module whose forward calls it"
        )
    if not isinstance(args, tuple):
        raise AotiUsageError(
            f"args must be a tuple of positional inputs, got {type(args).__name__}; "
            "write (x,) for a single input"
        )
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise AotiUsageError(f"kwargs must be a dict, got {type(kwargs).__name__}")


def _checked_samples(samples: Any, dynamic_shapes: Any) -> list[tuple[Any, ...]]:
    __tracebackhide__ = True
    if samples is None:
        return []
    if isinstance(samples, tuple) or not isinstance(samples, Sequence):
        raise AotiUsageError(
            "samples must be a list of argument tuples, e.g. samples=[(x2,), (x3,)]"
        )
    for index, sample in enumerate(samples):
        if not isinstance(sample, tuple):
            raise AotiUsageError(
                f"samples[{index}] must be a tuple of positional inputs, got {type(sample).__name__}"
            )
    if samples and dynamic_shapes is None:
        raise AotiUsageError(
            'samples need dynamic_shapes: pass a torch.export spec or dynamic_shapes="auto"'
        )
    return list(samples)


def _assert_signature(
    program: AotiProgram,
    mutates: Mapping[str, Any] | None,
    mutated_buffers: Iterable[str] | None,
) -> None:
    __tracebackhide__ = True
    if mutates is not None:
        if not isinstance(mutates, Mapping):
            raise AotiUsageError(
                f"mutates must be a dict of input name to expected value, got {type(mutates).__name__}"
            )
        expected = set(mutates)
        actual = program.mutated_inputs
        if expected != actual:
            inputs = ", ".join(program.signature.user_inputs) or "none"
            raise AotiCheckError(
                f"mutated inputs differ: expected {_names(expected)}, "
                f"the program mutates {_names(actual)}\n"
                f"inputs of the program: {inputs}"
            )
    if mutated_buffers is not None:
        if isinstance(mutated_buffers, str):
            raise AotiUsageError(
                f'mutated_buffers must be a set of buffer names, e.g. {{"{mutated_buffers}"}}'
            )
        expected = set(mutated_buffers)
        actual = program.mutated_buffers
        if expected != actual:
            raise AotiCheckError(
                f"mutated buffers differ: expected {_names(expected)}, "
                f"the program mutates {_names(actual)}"
            )


def _assert_extra_bytes(memory: PeakMemory, plan: _CheckPlan, program: AotiProgram) -> None:
    __tracebackhide__ = True
    from pytest_aoti.findings import Finding

    limit = plan.max_extra_bytes
    if limit is None or not memory.measured or memory.peak_bytes <= limit:
        return
    mutated = sorted(program.mutated_inputs)
    raise AotiCheckError(
        Finding(
            kind="memory",
            location="the engine call",
            phrase=f"allocated {memory.peak_bytes:,} bytes of {memory.device} memory",
            summary=f"more than max_extra_bytes={limit:,}",
            details=(
                "measured as the peak allocated during the call minus what was allocated "
                "before it (outputs included), over the example's calls",
                *(
                    [
                        "the program mutates "
                        + ", ".join(repr(name) for name in mutated)
                        + ": an engine that copies a mutated input instead of writing into "
                        "it costs that input's size per call"
                    ]
                    if mutated
                    else []
                ),
            ),
            extra={"extra_bytes": memory.peak_bytes, "max_extra_bytes": limit},
        )
    )


def _names(names: Iterable[str]) -> str:
    ordered = sorted(names)
    return "{" + ", ".join(repr(name) for name in ordered) + "}" if ordered else "none"


def _buffer_warning(program: AotiProgram) -> AotiBufferMutationWarning:
    return AotiBufferMutationWarning(
        f"the program mutates registered buffers {_names(program.mutated_buffers)}: one engine "
        "shared by several threads shares this state and is not thread-safe; pass the state "
        "as an input the program mutates instead"
    )
