"""Everything the reports of one session are made of, and the one payload an xdist worker
sends the controller (merged by :meth:`ReportCollector.merge`).

The compiling modules are imported where figures are added up, not at plugin load."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_aoti.reports.progress import CompileEvent
from pytest_aoti.reports.records import CheckRecord, CompileRecord

if TYPE_CHECKING:
    from pytest_aoti.cache.registry import CompileStats

PAYLOAD_KEY = "aoti"
"""The key of a worker's payload in xdist's ``workeroutput``."""


@dataclass
class ReportCollector:
    """The records, figures and problems of a session; on the xdist controller, the
    workers' too."""

    records: list[CheckRecord] = field(default_factory=list)
    compiles: list[CompileRecord] = field(default_factory=list)
    inferred: list[tuple[str, str]] = field(default_factory=list)
    """``(node id, spec text)`` of ``dynamic_shapes="auto"`` results."""
    cache_problems: list[str] = field(default_factory=list)
    """Cache problems the store repaired or worked around (each once)."""
    notes: list[str] = field(default_factory=list)
    """What checks noted without failing (buffer state, torch's own warnings), each once."""
    reseeded: list[str] = field(default_factory=list)
    """Tests that compiled a program differing from their last run's only in weights."""
    skipped_devices: dict[str, str] = field(default_factory=dict)
    """Devices of the ini's list this machine lacks, with why: their tests were skipped."""
    worker_events: list[CompileEvent] = field(default_factory=list)
    """Long compiles on xdist workers (this process's were shown as they happened)."""
    worker_stats: CompileStats | None = None
    """The workers' compile figures, added up; None until a worker sent some."""
    worker_remote: list[dict[str, Any]] = field(default_factory=list)
    """The remote store figures (``RemoteStats.to_json()``) of each worker that had one."""

    def cache_problem(self, message: str) -> None:
        if message not in self.cache_problems:
            self.cache_problems.append(message)

    def note(self, message: str) -> None:
        if message not in self.notes:
            self.notes.append(message)

    def totals(self, own: CompileStats | None) -> CompileStats:
        """This process's compile figures with the workers'."""
        from pytest_aoti.cache.registry import CompileStats

        total = CompileStats()
        for stats in (own, self.worker_stats):
            if stats is not None:
                total.merge(stats)
        return total

    def remote_figures(self, own: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        """``{"remote": ...}`` of this process (``own``, where it has a remote store) and of
        each xdist worker that had one."""
        mine = [] if own is None else [dict(own)]
        return [{"remote": figures} for figures in [*mine, *self.worker_remote]]

    def payload(
        self,
        stats: CompileStats | None,
        events: Sequence[CompileEvent],
        remote: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """What a worker sends: plain data that execnet can carry. ``remote``: its remote
        store figures, where it has a store (``--aoti-cache-url``)."""
        from pytest_aoti.cache.registry import CompileStats

        extra = {"remote": dict(remote)} if remote is not None else {}
        return {
            "records": [record.to_json() for record in self.records],
            "compiles": [record.to_json() for record in self.compiles],
            "inferred": [list(pair) for pair in self.inferred],
            "cache_problems": list(self.cache_problems),
            "notes": list(self.notes),
            "reseeded": list(self.reseeded),
            "skipped_devices": dict(self.skipped_devices),
            "events": [event.to_json() for event in events],
            "stats": (stats or CompileStats()).payload(),
            **extra,
        }

    def merge(self, payload: Mapping[str, Any]) -> None:
        """Add a worker's :meth:`payload`."""
        self.records += [CheckRecord.from_json(data) for data in payload.get("records", [])]
        self.compiles += [CompileRecord.from_json(data) for data in payload.get("compiles", [])]
        self.inferred += [(str(nodeid), str(text)) for nodeid, text in payload.get("inferred", [])]
        for message in payload.get("cache_problems", []):
            self.cache_problem(str(message))
        for message in payload.get("notes", []):
            self.note(str(message))
        for test in payload.get("reseeded", []):
            if str(test) not in self.reseeded:
                self.reseeded.append(str(test))
        for name, reason in payload.get("skipped_devices", {}).items():
            self.skipped_devices.setdefault(str(name), str(reason))
        self.worker_events += [CompileEvent.from_json(data) for data in payload.get("events", [])]
        remote = payload.get("remote")
        if isinstance(remote, Mapping):
            self.worker_remote.append(dict(remote))
        from pytest_aoti.cache.registry import CompileStats

        if self.worker_stats is None:
            self.worker_stats = CompileStats()
        self.worker_stats.merge(CompileStats.from_payload(payload.get("stats", {})))
