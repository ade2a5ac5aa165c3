"""Everything the reports of one session are made of, and the one payload an xdist worker sends
the controller."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar

from pytest_aoti.cache.registry import CompileStats
from pytest_aoti.reports.header import torch_build, torch_version
from pytest_aoti.reports.json_report import REPORT_VERSION
from pytest_aoti.reports.progress import CompileEvent
from pytest_aoti.reports.records import CheckRecord, CompileRecord

PAYLOAD_KEY = "aoti"
"""The key of a worker's payload in xdist's ``workeroutput``."""


@dataclass
class ReportCollector:
    """The records, figures and problems of a session (and of its xdist workers, or of the
    reports of CI shards merged into one), and the JSON report made of them."""

    VERSION: ClassVar[int] = REPORT_VERSION
    """The JSON report's format version; docs/reports.md lists what each changed."""

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

    def document(
        self,
        *,
        devices: Sequence[str],
        totals: Mapping[str, Any],
        interrupted: bool = False,
        created: str | None = None,
        torch: str | None = None,
        build: str | None = None,
    ) -> dict[str, Any]:
        """The JSON report's document of the records and compiles collected; ``created``,
        ``torch`` and ``build`` default to this run's."""
        return {
            "version": REPORT_VERSION,
            "created": created or datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "torch": torch or torch_version(),
            "build": build or torch_build(),
            "devices": list(devices),
            "interrupted": interrupted,
            "totals": dict(totals),
            "checks": [record.to_json() for record in self.records],
            "compiles": [record.to_json() for record in self.compiles],
        }

    def write_run_report(
        self,
        path: Path,
        *,
        stats: CompileStats | None,
        totals: Mapping[str, Any],
        devices: Sequence[str],
        interrupted: bool,
    ) -> None:
        """This run's report: records, this process's and workers' figures, plugins' totals."""
        used = {record.device for record in self.records}
        used |= {record.device for record in self.compiles}
        document = self.document(
            devices=sorted(used) or list(devices),
            totals={**self.totals(stats).to_json(), **totals},
            interrupted=interrupted,
        )
        self.write(path, document)

    def durations_table(self, limit: int) -> list[str]:
        """The slowest AOTI checks collected, like ``--durations`` (``limit`` rows, 0: all)."""
        return durations_table(self.records, limit)

    @staticmethod
    def write(path: Path, document: Mapping[str, Any]) -> None:
        """Write a report document atomically: a reader never sees half a file (it is
        written to a temporary name, then renamed)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps(document, indent=2, default=str) + "\n")
        os.replace(partial, path)


def durations_table(records: Sequence[CheckRecord], limit: int) -> list[str]:
    """The slowest AOTI checks, like ``--durations`` (``limit`` rows, 0 for all)."""
    ordered = sorted(records, key=lambda record: record.check_seconds, reverse=True)
    if limit:
        ordered = ordered[:limit]
    timed = any(record.speed_ratio is not None for record in ordered)
    rows: list[tuple[str, ...]] = [
        ("seconds", "compile", "shapes", "err/tol", "engine/eager", "outcome", "test")
    ]
    for record in ordered:
        compile_text = "cached" if record.cache_hit else f"{record.compile_seconds:.1f}"
        if not record.program:
            compile_text = "-"  # export or compile failed: there is no program
        elif not record.cache_hit and record.compile_seconds == 0:
            compile_text = "shared"
        rows.append(
            (
                f"{record.check_seconds:.2f}",
                compile_text,
                str(record.shapes_tried),
                _error_text(record),
                _ratio_text(record),
                record.outcome,
                f"{record.label} ({record.device})",
            )
        )
    if not timed:  # a column of n/a and busy says nothing
        rows = [(*row[:4], *row[5:]) for row in rows]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    return [
        "  ".join(cell.rjust(width) for cell, width in zip(row[:-1], widths)) + "  " + row[-1]
        for row in rows
    ]


def _error_text(record: CheckRecord) -> str:
    if record.fp64_rescued and record.outcome == "passed":
        return "fp64 ok"  # beyond the tolerance, accepted by the fp64 rule
    return "-" if record.tolerance_used is None else f"{record.tolerance_used:.2g}"


def _ratio_text(record: CheckRecord) -> str:
    ratio = record.speed_ratio
    if ratio is not None:
        return f"{ratio:.2f}" if ratio >= 0.1 else f"{ratio:.2g}"
    if record.timed and not record.too_short and record.busy:
        return "busy"  # timed while the machine was saturated: no figure to read
    # timed, or a passed check whose timing gave no figure: too short to time
    return "n/a" if record.timed or (record.outcome == "passed" and record.program) else "-"
