"""What the reports are made of: one record per ``aoti.check`` and per ``aoti.compile``,
collected by the session (xdist: from the workers too); every view is rendered from them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

TOO_SHORT_TO_TIME_SECONDS = 1e-3
"""A median call shorter than this is not timed (its ratio shows ``n/a``): such a call
waits on the scheduler longer than it runs, so ratios swing by orders of magnitude."""

BUSY_LOAD = 1.0
"""Load average per CPU at or above which the machine was saturated while a check was
timed: its ratio shows ``busy``, not a figure."""


@dataclass
class CheckRecord:
    """What one ``aoti.check`` call did and measured."""

    test: str  # the pytest node id
    device: str
    program: str
    """The program's content key."""
    cache_hit: bool
    compile_seconds: float
    """Seconds this check spent compiling (0 on a cache hit or an earlier compile)."""
    original_compile_seconds: float
    """Seconds the compile that produced the package took, whenever that was."""
    outcome: str = "passed"
    max_abs: float | None = None
    max_rel: float | None = None
    tolerance_used: float | None = None
    """The worst leaf's error as a fraction of what its tolerance allowed (1 = at the limit)."""
    fp64_rescued: bool = False
    """A leaf beyond its tolerance passed by the fp64 rule."""
    shapes_tried: int = 0
    """Input sets run through the engine and compared, summed over the check's checks: the
    example and samples, aliased copies, generated shapes, values draws, weight sets."""
    calls: int = 1
    engine_seconds: float | None = None
    """Median wall time of one engine call, after the first."""
    eager_seconds: float | None = None
    """Median wall time of one eager call, after the first."""
    timing_load: float | None = None
    """The 1-minute load average per CPU when the calls were timed (None: unknown)."""
    profile: str | None = None  # the Chrome trace written for this check (--aoti-profile)
    finding: dict[str, Any] | None = None
    """For a failure: the finding (kind, stage, node, figures)."""
    check_seconds: float = 0.0  # wall time of the whole check, compile included
    worker: str = ""  # the xdist worker that ran the check (gw0); empty without xdist
    source: str = ""
    """Where the program's package came from: ``compiled``, ``local`` or ``remote``."""
    check_index: int = 1
    """Which ``aoti.check`` of its test this is (shown as ``#2`` for the second)."""
    layout: str = ""
    """The memory layout the check's example was relaid in and its program compiled from
    (the ``layouts`` option: ``channels_last``); empty for the example's own."""
    notes: list[str] = field(default_factory=list)
    """What the check noted without failing (mutated buffer state, torch's warnings...)."""
    buffers: list[dict[str, Any]] = field(default_factory=list)
    """The mutated registered buffers as compared with eager's: ``name``, ``verified``,
    ``calls_compared``, ``max_abs``, ``max_rel``, ``reason``."""
    other_fields: dict[str, Any] = field(default_factory=dict)
    """Undeclared fields a check adds; a run's records start with every feature's
    ``record_fields`` (``Catalog.record_fields``), so every record has their keys."""

    def update(self, fields: Mapping[str, Any]) -> None:
        """Set the fields a check reported (its figures), declared here or not."""
        for name, value in fields.items():
            if name in _DECLARED:
                setattr(self, name, value)
            else:
                self.other_fields[name] = value

    @property
    def speed_ratio(self) -> float | None:
        """Engine time over eager time per call (below 1: the engine is faster); None where
        a side was not timed, a call is :attr:`too_short` or the machine :attr:`busy`."""
        if self.engine_seconds is None or self.eager_seconds is None:
            return None
        if self.too_short or self.busy:
            return None
        return self.engine_seconds / self.eager_seconds

    @property
    def too_short(self) -> bool:
        """Both sides timed, and one call too short to time."""
        if self.engine_seconds is None or self.eager_seconds is None:
            return False
        return min(self.engine_seconds, self.eager_seconds) < TOO_SHORT_TO_TIME_SECONDS

    @property
    def busy(self) -> bool:
        """Timed on a saturated machine (:data:`BUSY_LOAD`): the times are no finding."""
        return self.timing_load is not None and self.timing_load >= BUSY_LOAD

    @property
    def timed(self) -> bool:
        """Both sides were timed (the ratio may still be too short to mean anything)."""
        return self.engine_seconds is not None and self.eager_seconds is not None

    @property
    def label(self) -> str:
        """``test_x.py::test_a[cpu]``, with ``#2`` for a test's second check and
        ``[channels_last]`` for its check in that layout."""
        test = f"{self.test}[{self.layout}]" if self.layout else self.test
        return test if self.check_index <= 1 else f"{test} #{self.check_index}"

    @property
    def stage(self) -> str | None:
        """Where a failure arose (``export``, ``decompose``, ``compile``), else None."""
        if self.finding is None:
            return None
        stage = self.finding.get("stage")
        return None if stage is None else str(stage)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(data.pop("other_fields"))
        data["engine_over_eager"] = self.speed_ratio
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CheckRecord:
        record = cls(**{key: value for key, value in data.items() if key in _DECLARED})
        record.other_fields.update(
            (k, v) for k, v in data.items() if k not in _DECLARED and k not in _DERIVED
        )
        return record


_DECLARED = frozenset(CheckRecord.__dataclass_fields__) - {"other_fields"}
_DERIVED = frozenset({"engine_over_eager"})  # computed from other fields, never read back


@dataclass
class CompileRecord:
    """What one ``aoti.compile`` call produced (a test may compile without checking)."""

    test: str
    device: str
    program: str
    cache_hit: bool
    compile_seconds: float
    original_compile_seconds: float
    worker: str = ""
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CompileRecord:
        names = set(cls.__dataclass_fields__)
        return cls(**{key: value for key, value in data.items() if key in names})
