"""What every check is: the :class:`Check` protocol, the :class:`CheckPlan` it reads, the
:class:`CheckContext` of its phase (:data:`PHASES`) and the :class:`Outcome` it returns (or
an :class:`~pytest_aoti.AotiCheckError`); :mod:`pytest_aoti.run.phases` runs them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pytest_aoti.checks.budget import CheckBudget
from pytest_aoti.options.check_options import CheckOptions

if TYPE_CHECKING:
    import pytest
    import torch
    from torch.export import ExportedProgram

    from pytest_aoti.checks.side_by_side import CallRecord
    from pytest_aoti.compiling.program import AotiProgram
    from pytest_aoti.compiling.random_ops import RandomOp
    from pytest_aoti.errors import AotiCheckError
    from pytest_aoti.isolation.process import Job, PendingJobs
    from pytest_aoti.tolerance import LeafStats, Tolerance

InputSet = tuple[tuple[Any, ...], dict[str, Any]]  # (args, kwargs) of one call
Stats = tuple[tuple[str, "LeafStats"], ...]  # (context, stats) per leaf: ("call 2, sample 1", ...)

SERVED_FROM_BYTES = 2**25
"""Package size (mostly weights) from which a program without buffer state has one engine, in
the engine child, whose outputs the check takes. Below it, a second load costs less than the
child's start: the calls run in the child once (their verdicts kept with the package), then
here."""

Phase = Literal["eager", "exported", "engine"]
PHASES: tuple[Phase, ...] = ("eager", "exported", "engine")
"""When a check runs: on eager PyTorch, on the exported program, or on the engine."""


@dataclass(frozen=True)
class CheckPlan:
    """One ``aoti.check`` (or ``aoti.compile``) call, resolved before anything is exported
    and never changed after; what the call finds as it runs is on the :class:`CheckContext`."""

    module: torch.nn.Module
    """The module on the tester's device (a moved copy where it was elsewhere)."""
    input_sets: tuple[InputSet, ...]
    """The example and the samples, on the tester's device."""
    tolerance: Tolerance
    calls: int | None = None
    """The call's ``calls=``; None: the runner chooses (:attr:`CheckContext.calls`)."""
    mutates: Mapping[str, Any] | None = None
    mutated_buffers: Any = None
    """The ``mutated_buffers=`` the test declared (validated by the signature check)."""
    dynamic_shapes: Any = None
    """The spec the program is exported with (``"auto"`` is inferred before the run)."""
    inductor_configs: Mapping[str, Any] = field(default_factory=dict)
    """Merged: the ini file's, the hook's, the marker's, the call's; checked by Inductor."""
    options: CheckOptions = field(default_factory=CheckOptions)
    """Every per-check option's value (``plan.options.random``; a plugin's through ``of``)."""
    export_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """``torch.export.export`` options: the hook's and the variant's, then ``strict``."""
    notes: tuple[str, ...] = ()
    """What resolving the call noted (a ``torch.compile``'d module unwrapped)."""
    steps: int | None = None
    """The call's ``steps=``: a decode loop of that many calls (:mod:`pytest_aoti.steps`)."""
    next_inputs: Callable[..., Any] | None = None
    """The call's ``next_inputs=``: ``(outputs, args, kwargs) -> (args, kwargs)``."""

    @property
    def expect_at(self) -> int:
        """The call after which ``mutates`` values are checked."""
        return self.calls if self.calls is not None else 1


@dataclass(frozen=True)
class RecordPart:
    """What a check adds to the report's record of its ``aoti.check``
    (:class:`~pytest_aoti.reports.records.CheckRecord`)."""

    fields: Mapping[str, Any] = field(default_factory=dict)
    """JSON record fields by name (``{"engine_seconds": 0.002}``); undeclared ones are added."""
    notes: tuple[str, ...] = ()
    """What the check says without failing: the record's notes and the terminal summary."""
    properties: tuple[tuple[str, Any], ...] = ()
    """JUnit properties beyond the ones rendered from the record."""

    def __add__(self, other: RecordPart) -> RecordPart:
        return RecordPart(
            {**self.fields, **other.fields},
            self.notes + other.notes,
            self.properties + other.properties,
        )


@dataclass(frozen=True)
class Outcome:
    """What a check that passed measured."""

    stats: Stats = ()
    input_sets: int = 0
    """How many input sets it ran through the engine."""
    figures: Mapping[str, Any] = field(default_factory=dict)
    """Named figures for the :class:`~pytest_aoti.CheckResult`, e.g. ``{"extra_bytes": 0}``."""
    record: RecordPart = field(default_factory=RecordPart)


class Triage(Protocol):
    """What explains a failed input set: stage, diverging node, replay for the repro bundle.
    Handed to the checks, so no check imports triage."""

    def explain(
        self, error: AotiCheckError, run: CheckContext.ComparedRun, calls: int, *, attribute: bool
    ) -> AotiCheckError:
        """``error`` with the replay of ``run``'s inputs (and its stage and node)."""
        ...

    def replayed(
        self, error: AotiCheckError, module: torch.nn.Module, inputs: InputSet, calls: int
    ) -> AotiCheckError:
        """``error`` with the replay of ``inputs`` on ``module``."""
        ...


@dataclass
class CheckContext:
    """What the checks of one ``aoti.check`` share beyond the plan: the device, what the
    runner finds as the phases are reached, the figures so far. Checks only read it."""

    class ComparedRun(Protocol):
        """One input set eager and the engine ran side by side: what stage attribution replays."""

        program: AotiProgram
        module: torch.nn.Module

        def fresh_inputs(self) -> InputSet: ...

        def differs_with(self, replacement: Any, calls: int) -> bool:
            """Whether ``replacement`` (an uncompiled program) differs from eager here."""
            ...

    class ProgramAttachments(Protocol):
        """Data kept with a program's package in the cache (e.g. probe outcomes)."""

        def attached(self, key: str, name: str) -> dict[str, Any] | None: ...

        def attach(self, key: str, name: str, data: Mapping[str, Any]) -> None: ...

    device: torch.device
    triage: Triage | None = None
    hypothesis_database: Path | None = None
    """Where Hypothesis keeps failing generated shapes (pytest's cache dir)."""
    label: str = ""
    """The test id."""
    profile_path: Callable[[], Path | None] = lambda: None
    """Where a Chrome trace of the engine's calls goes (``--aoti-profile``); None: none."""
    attachments: CheckContext.ProgramAttachments | None = None
    """Where a check keeps what it learnt about a program's package, for later checks."""
    item: pytest.Item | None = None
    """The pytest test item (its markers, its node id); None outside a pytest test."""
    exported: ExportedProgram | None = None
    """The exported program, from the ``"exported"`` phase on."""
    random_ops: tuple[RandomOp, ...] = ()
    """The program's random ops (``"exported"`` phase on): no value check applies then."""
    compiled: AotiProgram | None = None
    """The compiled program, in the ``"engine"`` phase."""
    calls: int = 1
    """Calls per input set (``"engine"`` phase): the plan's ``calls``, else two for a
    program with buffer state, else one."""
    figures: Mapping[str, Any] = field(default_factory=dict)
    """The figures of the checks that ran so far, by name (``engine_seconds``)."""
    stats: Sequence[tuple[str, LeafStats]] = ()
    """``(context, stats)`` of every leaf the checks so far compared."""
    budget: CheckBudget = field(default_factory=CheckBudget)
    """How deep the searches beyond the example go (``"engine"`` phase): values draws,
    probes, generated shapes, weight sets, the C++ loader's sets, each planned from the
    program's size before its first item (:mod:`~pytest_aoti.checks.budget`)."""
    _engine: Any = field(default=None, init=False, repr=False)
    _engine_handed_out: bool = field(default=False, init=False, repr=False)
    _served: Any = field(default=None, init=False, repr=False)

    @property
    def program(self) -> AotiProgram:
        """The compiled program (``"engine"`` phase checks only)."""
        if self.compiled is None:
            raise RuntimeError("the program is compiled only for checks of the engine phase")
        return self.compiled

    def engine(self) -> Any:
        """The program's engine, shared by the checks (its buffers may be past other checks'
        calls). Where the engine child serves the program (:meth:`served_by_child`), a call it
        already made for the crash screen is answered with its outputs, and the engine loads in
        this process at the first other call."""
        if self._engine is None:
            program = self.program
            if not self.served_by_child():  # every call is made here, in order
                self._engine = program.engine_in_exported_state()
            else:
                from pytest_aoti.checks.served_calls import ServedEngine  # imports torch

                self._engine = ServedEngine(
                    program, self.served_calls(), program.engine_in_exported_state
                )
        self._engine_handed_out = True
        return self._engine

    def fresh_engine(self) -> Any:
        """An engine whose buffers hold their exported values: the shared one while unused
        (always, for a program without buffer state)."""
        if not self._engine_handed_out or not self.program.mutated_buffers:
            return self.engine()
        return self.program.engine_in_exported_state()

    def local_engine(self) -> Any:
        """The engine loaded in this process, for what must run here (threads, memory, the
        profile); with buffer state, the shared one."""
        engine = self.engine()
        return engine.loaded() if hasattr(engine, "loaded") else engine

    def served_by_child(self) -> bool:
        """Whether the engine child is the program's one engine, whose calls the check takes:
        a program without buffer state whose package is at least :data:`SERVED_FROM_BYTES`."""
        program = self.program
        return not program.mutated_buffers and program.package_bytes >= SERVED_FROM_BYTES

    def another_load_over_budget(self) -> bool:
        """Whether loading the package once more (a second engine, another process's) is
        beyond the check budget: a large program (by its weights and example, never its
        package or the clock) and a budget set. A check that would do so leaves its items
        to ``budget="off"``, and the summary says so."""
        return self.budget.limited

    def served_calls(self) -> Any:
        """The engine child's calls for this check (a ``ServedCalls``)."""
        if self._served is None:
            from pytest_aoti.checks.served_calls import ServedCalls  # imports torch

            self._served = ServedCalls(self.device)
        return self._served

    def engine_calls(self) -> dict[str, int] | None:
        """Calls of a program without buffer state: ``served`` from the engine child's
        outputs, ``made_here`` by the engine loaded in this process; None: no such calls."""
        if self._served is None:
            return None
        return {"served": self._served.served, "made_here": self._served.made_here}

    def measured_seconds(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> float | None:
        """Median seconds of one engine call on ``(args, kwargs)`` as the engine child timed
        it; None where it did not."""
        if self._served is None:
            return None
        from pytest_aoti.checks.served_calls import tensor_inputs  # imports torch

        return self._served.seconds(tensor_inputs(self.program, args, kwargs))  # type: ignore[no-any-return]

    # The mechanisms a check's searches share, as services of the context: the engine child's
    # jobs, eager's calls on clones of the inputs, a module's copy.

    @staticmethod
    def child_jobs(
        request: Mapping[str, Any],
        jobs: Sequence[Job],
        timeout: float,
        path: Sequence[str] = (),
        late: str = "not run: the time for these calls ran out",
    ) -> PendingJobs:
        """Start ``jobs`` (``(input set index, checked)``) of an engine-child ``request``
        (``path`` first on the child's ``sys.path``) within ``timeout`` seconds in all; the
        child works while this process goes on, and ``.results()`` waits for the result per
        job (a crashed or hung job has ``{"crashed": why, "signal": number or None}``, one the
        time left no room for ``{"crashed": late}``). Every started request is waited for."""
        from pytest_aoti.isolation.process import PendingJobs

        return PendingJobs(request, jobs, timeout, path, late)

    @staticmethod
    def child_beside() -> bool:
        """Whether the engine child may make its calls while this process makes its own (the
        cores hold both processes' torch threads); else the two run one after the other."""
        from pytest_aoti.isolation.process import side_by_side

        return side_by_side()

    def call_history(
        self,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        calls: int,
        *,
        eager: bool = False,
        ready: Callable[[], object] | None = None,
    ) -> list[CallRecord]:
        """``function`` called ``calls`` times on one clone of the inputs, without autograd:
        per call, its outputs and every named input of the program after it. ``eager``:
        ``function`` is the module, run as :meth:`eager_module`; ``ready``: called before
        the first call."""
        from pytest_aoti.checks.side_by_side import call_history

        return call_history(self.program, function, args, kwargs, calls, eager=eager, ready=ready)

    @staticmethod
    def eager_module(module: torch.nn.Module) -> torch.nn.Module:
        """The module eager runs: a copy sharing the caller's Parameters, owning the rest
        (a module ``copy.deepcopy`` refuses is copied field by field)."""
        from pytest_aoti.checks.side_by_side import eager_module

        return eager_module(module)

    @staticmethod
    def copy_module(module: torch.nn.Module, memo: dict[Any, Any] | None = None) -> torch.nn.Module:
        """``copy.deepcopy(module, memo)``, field by field (with the same ``memo``) where
        ``deepcopy`` refuses the module."""
        from pytest_aoti.checks.module_copy import copy_module

        return copy_module(module, memo)


class Check(Protocol):
    """One kind of check: a name, its phase, whether it applies to a plan, and the run."""

    name: str
    """Short and stable: ``parity``, ``aliasing``, ``memory``, ..."""
    phase: Phase
    """When it runs (:data:`PHASES`)."""

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        """Whether this check has anything to do for ``plan`` (``plan.options.random != "shapes"``)."""
        ...

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        """Check ``context`` at this phase; raise :class:`~pytest_aoti.AotiCheckError` on a
        difference."""
        ...


@dataclass(frozen=True)
class CheckResult:
    """What :meth:`~pytest_aoti.AotiTester.check` compared, with the largest errors it measured."""

    program: AotiProgram
    stats: tuple[tuple[str, LeafStats], ...]
    """``(context, stats)`` for every compared output and input leaf."""
    dynamic_shapes: Any = None
    """The ``dynamic_shapes`` spec the program was exported with (inferred for ``"auto"``)."""
    input_sets: int = 1
    """How many input sets were checked in all (example, samples, generated shapes...)."""
    figures: Mapping[str, Any] = field(default_factory=dict)
    """Every check's named figures where measured: ``examples``, ``extra_bytes``,
    ``buffers``, ``engine_seconds``, ``eager_seconds``, ``probes``, ..."""
    checks: tuple[str, ...] = ()
    """The checks of the compiled program that ran, in order (``signature``, ``parity``...)."""
    record: RecordPart = field(default_factory=RecordPart)
    """What the checks add to the report's record of this check."""

    @property
    def examples(self) -> int:
        """How many generated input sets were checked. Deprecated: read
        ``figures["examples"]`` (absent under ``-p no:aoti-generated``)."""
        return int(self.figures.get("examples", 0))

    @property
    def extra_bytes(self) -> int | None:
        """With ``max_extra_bytes``: the most device memory one engine call allocated
        beyond what was allocated before; None where not measured."""
        value = self.figures.get("extra_bytes")
        return None if value is None else int(value)

    @property
    def engine_seconds(self) -> float | None:
        """Median seconds of one engine call on the example (None: not measured)."""
        value = self.figures.get("engine_seconds")
        return None if value is None else float(value)

    @property
    def eager_seconds(self) -> float | None:
        """Median seconds of one eager call on the example (None: not measured)."""
        value = self.figures.get("eager_seconds")
        return None if value is None else float(value)

    @property
    def probes(self) -> Any:
        """The deployment probes' ``ProbeReport``, or None. Deprecated: read
        ``figures.get("probes")`` (absent under ``-p no:aoti-probes``)."""
        return self.figures.get("probes")

    @property
    def buffers(self) -> list[Any]:
        """A :class:`~pytest_aoti.checks.state.BufferState` per mutated registered buffer,
        compared with eager's after every call; empty without buffer state."""
        return list(self.figures.get("buffers", ()))

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
