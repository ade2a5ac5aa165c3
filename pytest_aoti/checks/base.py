"""What every check is: one small protocol, the plan it reads and the outcome it returns.

A check reads one plan (the module, the input sets, the tolerance, every per-check option)
and what its :class:`CheckContext` holds at its phase (the exported program, the compiled
program and its engine), and either returns an :class:`Outcome` (the figures it measured)
or raises :class:`~pytest_aoti.AotiCheckError` with a :class:`~pytest_aoti.findings.Finding`.
Every check declares its phase (:data:`PHASES`): ``"eager"`` before anything is compiled,
``"exported"`` once the program is exported and before its compile, ``"engine"`` once it is
compiled. :mod:`pytest_aoti.run.phases` runs the checks of
:data:`pytest_aoti.run.catalog.CHECKS` phase by phase, in order, then the checks other
plugins add (the ``pytest_aoti_checks`` hook); adding a built-in check is a module with one
:class:`Check` and its line there. A check reads its options as typed fields
of the plan's :class:`~pytest_aoti.features.CheckOptions`
(``plan.options.threads``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pytest_aoti.features import CheckOptions

if TYPE_CHECKING:
    import pytest
    import torch
    from torch.export import ExportedProgram

    from pytest_aoti.compiling.program import AotiProgram
    from pytest_aoti.compiling.random_ops import RandomOp
    from pytest_aoti.errors import AotiCheckError
    from pytest_aoti.tolerance import LeafStats, Tolerance

InputSet = tuple[tuple[Any, ...], dict[str, Any]]
"""``(args, kwargs)`` of one call."""

Stats = tuple[tuple[str, "LeafStats"], ...]
"""``(context, stats)`` per compared leaf, e.g. ``("call 2, sample 1", LeafStats(...))``."""

Phase = Literal["eager", "exported", "engine"]
PHASES: tuple[Phase, ...] = ("eager", "exported", "engine")
"""When a check runs: on eager PyTorch before any compile, on the exported program before
its compile, or on the compiled program's engine."""


@dataclass(frozen=True)
class CheckPlan:
    """One ``aoti.check`` (or ``aoti.compile``) call, resolved before anything is exported
    (:func:`pytest_aoti.run.resolve.resolve_call`) and never changed after: what compiling
    and every check read. Every per-check option is a field of :attr:`options`
    (``plan.options.threads``); what is found while the call runs (the program's random
    ops, the calls per input set) is on the :class:`CheckContext`."""

    module: torch.nn.Module
    """The module on the tester's device (a moved copy where it was elsewhere: never the
    caller's, moved)."""
    input_sets: list[InputSet]
    """The example and the samples, on the tester's device."""
    tolerance: Tolerance
    calls: int | None = None
    """The call's ``calls=``; None: the runner chooses (:attr:`CheckContext.calls`)."""
    mutates: Mapping[str, Any] | None = None
    mutated_buffers: Any = None
    """The ``mutated_buffers=`` the test declared (validated by the signature check)."""
    dynamic_shapes: Any = None
    """The spec the program is exported with (inferred for ``"auto"`` before the plan is
    run)."""
    inductor_configs: Mapping[str, Any] = field(default_factory=dict)
    """Merged: the ini file's, the hook's, the marker's, the call's; checked by Inductor."""
    options: CheckOptions = field(default_factory=CheckOptions)
    """Every per-check option's value for this check."""
    export_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """``torch.export.export`` options: the hook's and the variant's, then ``strict``."""
    notes: tuple[str, ...] = ()
    """What resolving the call noted without failing (a ``torch.compile``'d module unwrapped)."""

    @property
    def expect_at(self) -> int:
        """The call after which ``mutates`` values are checked."""
        return self.calls if self.calls is not None else 1


@dataclass(frozen=True)
class RecordPart:
    """What a check adds to the report's record of its ``aoti.check``
    (:class:`~pytest_aoti.reports.records.CheckRecord`): a new figure is a field here, set
    by its check and by nothing else."""

    fields: Mapping[str, Any] = field(default_factory=dict)
    """Fields of the check's JSON record, by name, e.g. ``{"engine_seconds": 0.002}``; a
    name the record does not declare is a JSON field of its own (an additive one)."""
    notes: tuple[str, ...] = ()
    """What the check says without failing: the record's notes and the terminal summary."""
    properties: tuple[tuple[str, Any], ...] = ()
    """JUnit properties beyond the ones rendered from the record, e.g.
    ``(("aoti_measure_error", "..."),)``."""

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
    """What the check adds to the report's record."""


class ComparedRun(Protocol):
    """One input set that eager and the engine ran side by side
    (:class:`~pytest_aoti.checks.parity.InputRun`): what stage attribution replays."""

    program: AotiProgram
    module: torch.nn.Module

    def fresh_inputs(self) -> InputSet:
        """New clones of the input set, as the check received it."""
        ...

    def differs_with(self, replacement: Any, calls: int) -> bool:
        """Whether ``replacement`` (an uncompiled program in place of the engine) differs
        from eager on this input set."""
        ...


class Triage(Protocol):
    """What explains a failed input set: stage attribution, the diverging node and the
    replay for the repro bundle (:class:`pytest_aoti.triage.attribution.Attribution`).
    The tester hands it to the checks, so no check imports triage."""

    def explain(
        self, error: AotiCheckError, run: ComparedRun, calls: int, *, attribute: bool
    ) -> AotiCheckError:
        """``error`` with the replay of ``run``'s inputs, and with ``attribute`` its stage
        and node."""
        ...

    def replayed(
        self, error: AotiCheckError, module: torch.nn.Module, inputs: InputSet, calls: int
    ) -> AotiCheckError:
        """``error`` with the replay of ``inputs`` on ``module``, its stage already known."""
        ...


class Sidecars(Protocol):
    """Data kept with a program's package, beside it in the cache (e.g. probe outcomes):
    the :class:`~pytest_aoti.cache.registry.ProgramRegistry`."""

    def sidecar(self, key: str, name: str) -> dict[str, Any] | None:
        """The data ``name`` kept with program ``key``; None when there is none."""
        ...

    def keep_sidecar(self, key: str, name: str, data: Mapping[str, Any]) -> None:
        """Keep ``data`` as ``name`` with program ``key``, for this session and the cache."""
        ...


@dataclass
class CheckContext:
    """What the checks of one ``aoti.check`` call share beyond the plan: where they run,
    the facts the runner finds as the phases are reached (the exported program and its
    random ops, then the compiled program, its engine and the calls per input set), and
    the figures the checks measured so far.

    The runner of the plan (:mod:`pytest_aoti.run.phases`) sets them; checks only read them.
    """

    device: torch.device
    triage: Triage | None = None
    hypothesis_database: Path | None = None
    """Where Hypothesis keeps failing generated shapes (pytest's cache dir)."""
    label: str = ""
    """The test id: tells this check's saved examples and compiles from others'."""
    profile_path: Callable[[], Path | None] = lambda: None
    """Where a Chrome trace of the engine's calls goes (``--aoti-profile``); None: none."""
    sidecars: Sidecars | None = None
    """Where a check keeps what it learnt about a program's package (the probes' outcomes),
    so that later checks and sessions sharing the program reuse it."""
    item: pytest.Item | None = None
    """The pytest test item the call runs in (its markers, its node id); None outside a
    pytest test."""
    exported: ExportedProgram | None = None
    """The exported program, from the ``"exported"`` phase on."""
    random_ops: tuple[RandomOp, ...] = ()
    """The program's random operations, read from the exported graph (``"exported"`` phase
    on): for such a program no check that compares values applies; the random check judges
    it (``plan.options.random``)."""
    compiled: AotiProgram | None = None
    """The compiled program, in the ``"engine"`` phase."""
    calls: int = 1
    """Calls per input set, in the ``"engine"`` phase: the plan's ``calls``, else two for a
    program with buffer state (its state is wrong from the second call on), else one."""
    figures: Mapping[str, Any] = field(default_factory=dict)
    """The figures of the checks that ran so far (``engine_seconds`` once timing ran), by
    name; a check of a later phase, or later in its phase, reads them."""
    _engine: Any = field(default=None, init=False, repr=False)
    _engine_handed_out: bool = field(default=False, init=False, repr=False)

    @property
    def program(self) -> AotiProgram:
        """The compiled program (``"engine"`` phase checks only)."""
        if self.compiled is None:
            raise RuntimeError("the program is compiled only for checks of the engine phase")
        return self.compiled

    def engine(self) -> Any:
        """The program's engine, loaded once and shared by the checks that measure it
        (memory, timing): its buffers may be past other checks' calls. Loading another one
        for a program with buffer state would map the package again, for good."""
        if self._engine is None:
            self._engine = self.program.engine_in_exported_state()
        self._engine_handed_out = True
        return self._engine

    def fresh_engine(self) -> Any:
        """An engine whose buffers hold their exported values: the shared one while no
        check has called it, else a new one (for a program without buffer state, the one
        engine every user of the package shares)."""
        if not self._engine_handed_out:
            return self.engine()
        return self.program.engine_in_exported_state()


class Check(Protocol):
    """One kind of check: a name, its phase, whether it applies to a plan, and the run."""

    name: str
    """Short and stable: ``parity``, ``aliasing``, ``memory``, ..."""
    phase: Phase
    """When it runs (:data:`PHASES`); the checks of a phase run in the catalog's order."""

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        """Whether this check has anything to do for ``plan`` at its phase (e.g.
        ``plan.options.threads > 1``, or ``not context.random_ops``)."""
        ...

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        """Check what ``context`` holds at this phase; raise
        :class:`~pytest_aoti.AotiCheckError` on a difference."""
        ...


@dataclass(frozen=True)
class CheckResult:
    """What :meth:`~pytest_aoti.AotiTester.check` compared, with the largest errors it measured."""

    program: AotiProgram
    stats: tuple[tuple[str, LeafStats], ...]
    """``(context, stats)`` for every compared output and input leaf, e.g.
    ``("call 2, sample 1", LeafStats(location="output[0]", ...))``."""
    dynamic_shapes: Any = None
    """The ``dynamic_shapes`` spec the program was exported with (inferred for ``"auto"``)."""
    input_sets: int = 1
    """How many input sets were checked in all: the example, samples, distinct copies of
    aliased inputs, boundary and generated shapes."""
    figures: Mapping[str, Any] = field(default_factory=dict)
    """Every check's named figures: ``examples``, ``extra_bytes``, ``buffers``,
    ``engine_seconds``, ``eager_seconds``, ``load``, ``profile``, ``measure_error`` where
    measured; ``probes`` (a :class:`~pytest_aoti.probes.outcomes.ProbeReport`) where probes ran."""
    checks: tuple[str, ...] = ()
    """The checks of the compiled program that ran, in order (``signature``, ``parity``,
    ``timing``, ...)."""
    record: RecordPart = field(default_factory=RecordPart)
    """What the checks add to the report's record of this check (JSON fields, notes, JUnit
    properties), for the session's reports."""

    @property
    def examples(self) -> int:
        """How many generated input sets were checked."""
        return int(self.figures.get("examples", 0))

    @property
    def extra_bytes(self) -> int | None:
        """With ``max_extra_bytes``: the most device memory one engine call allocated beyond
        what was allocated before it; None where it is not measured (the CPU)."""
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
        """The deployment probes of the program, a
        :class:`~pytest_aoti.probes.outcomes.ProbeReport` (typed loosely: that module builds
        on this one); None with ``probes="off"`` or where the check did not get that far."""
        return self.figures.get("probes")

    @property
    def buffers(self) -> list[Any]:
        """How each registered buffer the program mutates was compared with eager's after
        every call: :class:`~pytest_aoti.checks.state.BufferState` per buffer (``name``,
        ``verified``, ``calls_compared``, ``max_abs``, ``max_rel``, ``reason``); empty for a
        program without buffer state."""
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
