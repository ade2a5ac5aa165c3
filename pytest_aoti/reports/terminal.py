"""The terminal summary: inferred specs, durations, workers' compiles, the plugins' sections,
cache problems, notes and the compile figures."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from pytest_aoti.cache.history import SEED_ADVICE
from pytest_aoti.cache.registry import CompileStats
from pytest_aoti.findings import layouts_lead
from pytest_aoti.reports.collector import ReportCollector
from pytest_aoti.reports.depth import left_out_lines
from pytest_aoti.reports.progress import worker_lines
from pytest_aoti.reports.records import CheckRecord


class SectionWriter(Protocol):
    """What a plugin's section of the terminal summary writes to: pytest's terminal
    reporter (or a stand-in that keeps the lines)."""

    def write_sep(self, sep: str, title: str) -> Any: ...

    def write_line(self, line: str) -> Any: ...


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


def summary_line(totals: CompileStats) -> str:
    """``aoti: 3 programs; 2 compiled in 14.1 s; 1 loaded from cache in 1.2 ms``: the load
    time as measured, never rounded to nothing; left out where loads were counted but no time
    was (a shard's report without it)."""
    count = len(totals.programs)
    if not count:
        return ""
    loaded = f"{totals.loaded} loaded from cache"
    if totals.load_seconds > 0:
        loaded += f" in {_short_seconds(totals.load_seconds)}"
    elif not totals.loaded:
        loaded += " in 0.00 s"
    return (
        f"aoti: {count} program{'s' if count != 1 else ''}; "
        f"{totals.compiled} compiled in {totals.compile_seconds:.1f} s; {loaded}"
    )


def _short_seconds(seconds: float) -> str:
    """``0.41 s``; below 10 ms in milliseconds, two digits (``1.2 ms``, ``0.31 ms``)."""
    if seconds >= 0.01:
        return f"{seconds:.2f} s"
    return f"{seconds * 1000:.2g} ms"


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
        reporter.write_sep("-", f"aoti: {title}")
        for row in durations_table(records, durations):
            reporter.write_line(row)
    layouts = layout_lines(records)
    if layouts:
        reporter.write_sep("-", "aoti: failures by layout")
        for line in layouts:
            reporter.write_line(line)
    if collector.worker_events:
        reporter.write_sep("-", "aoti: compiles on xdist workers")
        for row in worker_lines(collector.worker_events):
            reporter.write_line(row)
    sections()
    if collector.cache_problems:
        reporter.write_sep("-", "aoti: cache problems (worked around; no test failed)")
        for problem in problem_lines(collector.cache_problems):
            reporter.write_line(problem)
    if collector.notes:
        reporter.write_sep("-", "aoti: notes (not failures)")
        for note in collector.notes:
            reporter.write_line(note)
    for name, reason in collector.skipped_devices.items():
        reporter.write_line(f"aoti: skipped the [{name}] tests: {reason}")
    if collector.reseeded:
        reporter.write_line(f"aoti: {SEED_ADVICE}:")
        for test in sorted(collector.reseeded):
            reporter.write_line(f"    {test}")
    for line in left_out_lines(records, verbose=getattr(reporter, "verbosity", 0) > 0):
        reporter.write_line(line)
    line = summary_line(totals)
    if line:
        reporter.write_line(line)
    for line in closing:
        reporter.write_line(line)
    if report is not None and (records or collector.compiles):
        reporter.write_line(f"aoti: report written to {report}")
