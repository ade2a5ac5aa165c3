"""What every check is: one small protocol, the plan it reads and the outcome it returns.

A check looks at one compiled program and one plan (the module, the input sets, the
tolerance, every per-check option) and either returns an :class:`Outcome` (the figures it
measured) or raises :class:`~pytest_aoti.AotiCheckError` with a
:class:`~pytest_aoti.findings.Finding`. The tester runs the checks of
:data:`pytest_aoti.checks.catalog.CHECKS` in order; adding a check is a module with one
:class:`Check` and its line there. A check reads its options from the plan by name
(``plan.threads``): an option is a row of :data:`pytest_aoti.settings.OPTIONS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from pytest_aoti.compiling.program import AotiProgram
    from pytest_aoti.compiling.randomness import RandomOp
    from pytest_aoti.errors import AotiCheckError
    from pytest_aoti.tolerance import LeafStats, Tolerance

InputSet = tuple[tuple[Any, ...], dict[str, Any]]
"""``(args, kwargs)`` of one call."""

Stats = tuple[tuple[str, "LeafStats"], ...]
"""``(context, stats)`` per compared leaf, e.g. ``("call 2, sample 1", LeafStats(...))``."""


@dataclass
class CheckPlan:
    """What one ``aoti.check`` call checks, once its arguments are resolved.

    Every per-check option (a row of :data:`pytest_aoti.settings.OPTIONS`: ``examples``,
    ``max_dim``, ``threads``, ``max_extra_bytes``, ...) is in :attr:`options` and reads as
    an attribute: ``plan.threads``, its row's default where :attr:`options` lacks it.
    """

    module: torch.nn.Module
    """The module on the tester's device."""
    input_sets: list[InputSet]
    """The example and the samples, on the tester's device."""
    tolerance: Tolerance
    calls: int
    mutates: Mapping[str, Any] | None = None
    mutated_buffers: Any = None
    """The ``mutated_buffers=`` the test declared (validated by the signature check)."""
    expect_at: int = 1
    """The call after which ``mutates`` values are checked."""
    dynamic_shapes: Any = None
    """The spec the program was exported with (inferred for ``"auto"``)."""
    inductor_configs: Mapping[str, Any] = field(default_factory=dict)
    """The configs the program was compiled with, for the localizer's compile."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Every per-check option's value for this check, by name."""
    random_ops: tuple[RandomOp, ...] = ()
    """The program's random operations, read from the exported graph: for such a program
    no check that compares values applies; the random check judges it (``plan.random``)."""

    def __getattr__(self, name: str) -> Any:
        # only reached for names that are not fields: the per-check options
        options = self.__dict__.get("options", {})
        if name in options:
            return options[name]
        from pytest_aoti.settings import check_option

        option = None if name.startswith("_") else check_option(name)
        if option is None:
            raise AttributeError(f"{type(self).__name__} has no option {name!r}")
        return option.default  # a plan made with some options only: the row's default


@dataclass(frozen=True)
class Outcome:
    """What a check that passed measured."""

    stats: Stats = ()
    input_sets: int = 0
    """How many input sets it ran through the engine."""
    figures: Mapping[str, Any] = field(default_factory=dict)
    """Named figures for the :class:`~pytest_aoti.CheckResult`, e.g. ``{"extra_bytes": 0}``."""


class Triage(Protocol):
    """What explains a failed input set: stage attribution, the diverging node and the
    replay for the repro bundle (:class:`pytest_aoti.triage.attribution.Attribution`).
    The tester hands it to the checks, so no check imports triage."""

    def explain(
        self, error: AotiCheckError, run: Any, calls: int, *, attribute: bool
    ) -> AotiCheckError:
        """``error`` with its replay, and with ``attribute`` its stage and node; ``run`` is
        the :class:`~pytest_aoti.checks.parity.InputRun` that failed (typed loosely: the
        parity check builds on this module)."""
        ...


class Sidecars(Protocol):
    """Data kept with a program's package, beside it in the cache (e.g. probe outcomes):
    the :class:`~pytest_aoti.compiling.registry.ProgramRegistry`."""

    def sidecar(self, key: str, name: str) -> dict[str, Any] | None:
        """The data ``name`` kept with program ``key``; None when there is none."""
        ...

    def keep_sidecar(self, key: str, name: str, data: Mapping[str, Any]) -> None:
        """Keep ``data`` as ``name`` with program ``key``, for this session and the cache."""
        ...


@dataclass
class CheckContext:
    """What the checks of one ``aoti.check`` call share beyond the plan."""

    device: torch.device
    triage: Triage | None = None
    hypothesis_database: Path | None = None
    """Where Hypothesis keeps failing generated shapes (pytest's cache dir)."""
    label: str = ""
    """The test id: tells this check's saved examples and compiles from others'."""
    profile_path: Callable[[], Path | None] = lambda: None
    """Where a Chrome trace of the engine's calls goes (``--aoti-profile``); None: none."""
    engine: Any = None
    """The engine of the first input set's parity run, kept for timing: loading another
    one for a program with buffer state would map the package again, for good."""
    sidecars: Sidecars | None = None
    """Where a check keeps what it learnt about a program's package (the probes' outcomes),
    so that later checks and sessions sharing the program reuse it."""


class Check(Protocol):
    """One kind of check: a name, whether it applies to a plan, and the run itself."""

    name: str
    """Short and stable: ``parity``, ``aliasing``, ``memory``, ..."""

    def applies(self, plan: CheckPlan) -> bool:
        """Whether this check has anything to do for ``plan`` (e.g. ``plan.threads > 1``)."""
        ...

    def run(self, program: AotiProgram, plan: CheckPlan, context: CheckContext) -> Outcome:
        """Check ``program``; raise :class:`~pytest_aoti.AotiCheckError` on a difference."""
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
    measured; ``probes`` (a :class:`~pytest_aoti.checks.probes.ProbeReport`) where probes ran."""
    checks: tuple[str, ...] = ()
    """The checks that ran, in order (``signature``, ``parity``, ``timing``, ...)."""

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
        :class:`~pytest_aoti.checks.probes.ProbeReport` (typed loosely: that module builds
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
