"""What the reports are made of: one record per ``aoti.check`` and per ``aoti.compile``.

The session collects these records (from this process and, under xdist, from the
workers); every view a user reads (the terminal table, the JSON report, JUnit properties)
is rendered from them by the other modules of :mod:`pytest_aoti.reports`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_aoti import features

TOO_SHORT_TO_TIME_SECONDS = 1e-3
"""A median call shorter than this is not timed: on a busy machine a call of a fraction of
a millisecond waits on the scheduler (or a descheduled OpenMP thread) for longer than it
runs, so the ratio of two such calls swings by orders of magnitude (0.38 ms against
111 ms measured for a tiny BERT). Its ratio is shown as ``n/a`` (no extra calls are made
to make it look measured)."""

BUSY_LOAD = 1.0
"""Load average per CPU at or above which the machine was saturated while a check was
timed: its ratio is shown as ``busy``, not as a figure (74 measured for a tiny conv whose
engine is faster than eager on an idle machine)."""


@dataclass
class CheckRecord:
    """What one ``aoti.check`` call did and measured."""

    test: str
    """The pytest node id."""
    device: str
    program: str
    """The program's content key."""
    cache_hit: bool
    compile_seconds: float
    """Seconds this check spent compiling: 0 on a cache hit or a program compiled earlier
    in the session."""
    original_compile_seconds: float
    """Seconds the compile that produced the package took, whenever that was."""
    outcome: str = "passed"
    """``passed`` or ``failed``."""
    max_abs: float | None = None
    max_rel: float | None = None
    tolerance_used: float | None = None
    """The worst leaf's error as a fraction of what its tolerance allowed (1 = at the limit)."""
    fp64_rescued: bool = False
    """A leaf was beyond its tolerance and passed by the fp64 rule (``tolerance_used`` above
    1 is then no failure)."""
    shapes_tried: int = 0
    """Input sets checked: the example, samples, boundary and generated shapes."""
    calls: int = 1
    engine_seconds: float | None = None
    """Median wall time of one engine call, after the first."""
    eager_seconds: float | None = None
    """Median wall time of one eager call, after the first."""
    timing_load: float | None = None
    """The machine's 1-minute load average per CPU when the calls were timed (None where
    the platform does not say)."""
    profile: str | None = None
    """The Chrome trace written for this check (``--aoti-profile``)."""
    finding: dict[str, Any] | None = None
    """For a failure: the finding (kind, stage, node, figures)."""
    check_seconds: float = 0.0
    """Wall time of the whole check, compile included."""
    worker: str = ""
    """The xdist worker that ran the check (``gw0``); empty without xdist."""
    extra_bytes: int | None = None
    """With ``max_extra_bytes``: the most device memory one engine call allocated."""
    extra_bytes_unmeasured: bool = False
    """``max_extra_bytes`` was asked for on a device whose memory is not measured (CPU)."""
    source: str = ""
    """Where the program's package came from: ``compiled``, ``local`` or ``remote``."""
    check_index: int = 1
    """Which ``aoti.check`` of its test this is: 2 for the second (shown as ``#2``)."""
    notes: list[str] = field(default_factory=list)
    """What the check noted without failing: buffer state the program mutates, warnings
    torch raised from its own frames while exporting and compiling, skipped input sets."""
    precision: list[dict[str, Any]] = field(default_factory=list)
    """Where eager rounds to its dtype and the engine does not (the float64 reference sides
    with the engine): ``location``, ``context``, ``dtype``, ``elements``, ``max_abs``."""
    buffers: list[dict[str, Any]] = field(default_factory=list)
    """The registered buffers the program mutates, read back from the engine and compared
    with eager's after every call: ``name``, ``verified``, ``calls_compared``, ``max_abs``,
    ``max_rel``, and ``reason`` where not verified."""
    other_fields: dict[str, Any] = field(
        default_factory=lambda: copy.deepcopy(dict(features.record_fields()))
    )
    """Fields a check adds that this record does not declare: JSON fields of their own.
    Every feature's fields (:func:`pytest_aoti.features.record_fields`) are here from the
    start, with their values where the feature did not run: every record has their keys."""

    def update(self, fields: Mapping[str, Any]) -> None:
        """Set the fields a check reported (its figures), declared here or not."""
        for name, value in fields.items():
            if name in _DECLARED:
                setattr(self, name, value)
            else:
                self.other_fields[name] = value

    @property
    def speed_ratio(self) -> float | None:
        """Engine time over eager time per call: below 1, the engine is faster; None where
        a side was not timed, one call is too short to time
        (:data:`TOO_SHORT_TO_TIME_SECONDS`) or the machine was saturated (:attr:`busy`)."""
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
        """``test_x.py::test_a[cpu]``, with ``#2`` for a test's second check."""
        return self.test if self.check_index <= 1 else f"{self.test} #{self.check_index}"

    @property
    def stage(self) -> str | None:
        """Where a failure arose (``export``, ``decompose``, ``compile``), None where no
        stage applies or the check passed."""
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
        names = _DECLARED
        record = cls(**{key: value for key, value in data.items() if key in names})
        record.other_fields.update(
            (key, value) for key, value in data.items() if key not in names and key not in _DERIVED
        )
        return record


_DECLARED = frozenset(CheckRecord.__dataclass_fields__) - {"other_fields"}
_DERIVED = frozenset({"engine_over_eager"})
"""JSON fields computed from others, never read back."""


@dataclass
class CompileRecord:
    """What one ``aoti.compile`` call produced (a test may compile without checking)."""

    test: str
    device: str
    program: str
    cache_hit: bool
    compile_seconds: float
    """Seconds this call spent compiling (0 on a cache hit or a program compiled earlier)."""
    original_compile_seconds: float
    worker: str = ""
    source: str = ""
    """Where the package came from: ``compiled``, ``local`` or ``remote``."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CompileRecord:
        names = set(cls.__dataclass_fields__)
        return cls(**{key: value for key, value in data.items() if key in names})
