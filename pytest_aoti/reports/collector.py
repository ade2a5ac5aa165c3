"""Everything the reports of one session are made of, and the one payload an xdist worker sends
the controller."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_aoti.cache.registry import CompileStats
from pytest_aoti.reports.progress import CompileEvent
from pytest_aoti.reports.records import CheckRecord, CompileRecord

PAYLOAD_KEY = "aoti"
"""The key of a worker's payload in xdist's ``workeroutput``."""


@dataclass
class ReportCollector:
    """The records, figures and problems of a session (and of its xdist workers)."""

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
    worker_figures: list[dict[str, Any]] = field(default_factory=list)
    """The plugins' figures (``pytest_aoti_figures``) of each worker that had some."""

    def cache_problem(self, message: str) -> None:
        if message not in self.cache_problems:
            self.cache_problems.append(message)

    def note(self, message: str) -> None:
        if message not in self.notes:
            self.notes.append(message)

    def totals(self, own: CompileStats | None) -> CompileStats:
        """This process's compile figures with the workers'."""
        total = CompileStats()
        for stats in (own, self.worker_stats):
            if stats is not None:
                total.merge(stats)
        return total

    def figures(self, own: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The plugins' figures of this process (``own``) and of each worker that has any."""
        return [dict(item) for item in [own, *self.worker_figures] if item]

    def payload(
        self,
        stats: CompileStats | None,
        events: Sequence[CompileEvent],
        figures: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """What a worker sends, with its plugins' ``figures``: through JSON, so that what
        execnet carries is plain data (a plugin's str enum or path included)."""
        payload = {
            "records": [record.to_json() for record in self.records],
            "compiles": [record.to_json() for record in self.compiles],
            "inferred": [list(pair) for pair in self.inferred],
            "cache_problems": list(self.cache_problems),
            "notes": list(self.notes),
            "reseeded": list(self.reseeded),
            "skipped_devices": dict(self.skipped_devices),
            "events": [event.to_json() for event in events],
            "stats": (stats or CompileStats()).payload(),
            "figures": dict(figures or {}),
        }
        return json.loads(json.dumps(payload, default=str))  # type: ignore[no-any-return]

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
        figures = payload.get("figures")
        if isinstance(figures, Mapping) and figures:
            self.worker_figures.append(dict(figures))
        if self.worker_stats is None:
            self.worker_stats = CompileStats()
        self.worker_stats.merge(CompileStats.from_payload(payload.get("stats", {})))
