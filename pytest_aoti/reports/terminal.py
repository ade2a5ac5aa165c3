"""The terminal summary: inferred specs, durations, workers' compiles, the plugins' sections,
cache problems, notes and the compile figures."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pytest_aoti.cache.history import SEED_ADVICE
from pytest_aoti.cache.registry import CompileStats
from pytest_aoti.findings import layouts_lead
from pytest_aoti.reports.collector import ReportCollector, durations_table
from pytest_aoti.reports.depth import left_out_lines
from pytest_aoti.reports.progress import worker_lines
from pytest_aoti.reports.records import CheckRecord


def layout_lines(records: Sequence[CheckRecord]) -> list[str]:
    """One line per check run in several layouts (``layouts``) that failed in one: which
    layouts it failed in and which it passed in."""
    runs: dict[tuple[str, str, int], list[CheckRecord]] = {}
    for record in records:
        runs.setdefault((record.test, record.device, record.check_index), []).append(record)
    lines = []
    for (test, device, index), run in runs.items():
        if not any(record.layout for record in run):
            continue
        failed = [record.layout for record in run if record.outcome != "passed"]
        if failed:
            passed = [record.layout for record in run if record.outcome == "passed"]
            label = test if index <= 1 else f"{test} #{index}"
            lines.append(f"{label} ({device}): {layouts_lead(failed, passed)}")
    return lines


_VARYING = re.compile(r"\b[0-9a-f]{8,}\b|(?:/[^\s:;,'\"]+)+|\d+(?:\.\d+)?")
"""What differs between two reports of one problem: cache keys, paths, sizes."""


def problem_lines(problems: Sequence[str]) -> list[str]:
    """One line per cache problem; those differing only in keys, paths and numbers are counted."""
    groups: dict[str, list[str]] = {}
    for problem in problems:
        groups.setdefault(_VARYING.sub("#", problem), []).append(problem)
    return [
        same[0] if len(same) == 1 else f"{same[0]} (and {len(same) - 1} more like it)"
        for same in groups.values()
    ]


def write_summary(
    reporter: Any,
    collector: ReportCollector,
    totals: CompileStats,
    *,
    durations: int,
    report: Path | None,
    closing: Sequence[str] = (),
    sections: Callable[[], object] = lambda: None,
) -> None:
    """Everything pytest-aoti adds to the terminal summary. ``sections`` writes the plugins'
    sections (after the checks' figures, before cache problems and notes); ``closing``: the
    plugins' lines after the compile figures."""
    if collector.inferred:
        reporter.write_sep("-", "aoti: inferred dynamic_shapes")
        for nodeid, text in sorted(collector.inferred):
            reporter.write_line(f"{nodeid}:")
            for line in text.splitlines():
                reporter.write_line(f"    {line}")
    records = collector.records
    if records and durations >= 0:
        title = "all AOTI checks" if durations == 0 else f"slowest {durations} AOTI checks"
        _section(reporter, title, durations_table(records, durations))
    _section(reporter, "failures by layout", layout_lines(records))
    _section(reporter, "compiles on xdist workers", worker_lines(collector.worker_events))
    sections()
    _section(
        reporter,
        "cache problems (worked around; no test failed)",
        problem_lines(collector.cache_problems),
    )
    _section(reporter, "notes (not failures)", collector.notes)
    for name, reason in collector.skipped_devices.items():
        reporter.write_line(f"aoti: skipped the [{name}] tests: {reason}")
    if collector.reseeded:
        reporter.write_line(f"aoti: {SEED_ADVICE}:")
        for test in sorted(collector.reseeded):
            reporter.write_line(f"    {test}")
    for line in left_out_lines(records, verbose=getattr(reporter, "verbosity", 0) > 0):
        reporter.write_line(line)
    line = totals.summary_line()
    if line:
        reporter.write_line(line)
    for line in closing:
        reporter.write_line(line)
    if report is not None and (records or collector.compiles):
        reporter.write_line(f"aoti: report written to {report}")


def _section(reporter: Any, title: str, lines: Sequence[str]) -> None:
    """A section of the summary titled ``aoti: title``, where it has lines."""
    if lines:
        reporter.write_sep("-", f"aoti: {title}")
        for line in lines:
            reporter.write_line(line)
