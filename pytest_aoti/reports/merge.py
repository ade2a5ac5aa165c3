"""Merge the ``--aoti-report`` files of CI shards into one report of the whole fleet run.

``python -m pytest_aoti merge-reports shard-*.json -o all.json`` reads each shard's
report, refuses one of another schema version, concatenates the checks, sums the totals
(as the xdist controller sums its workers') and prints the same summary table a single
run prints.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_aoti.reports.records import REPORT_VERSION, CheckRecord, durations_table

__all__ = ["ReportMergeError", "load_report", "merge_reports", "summary_lines", "write_report"]


class ReportMergeError(Exception):
    """A shard's report cannot be merged; the message says which file and why."""


def load_report(path: Path) -> dict[str, Any]:
    """One shard's report, checked for its schema version."""
    try:
        document = json.loads(Path(path).read_text())
    except OSError as error:
        raise ReportMergeError(f"{path}: cannot read it ({error.strerror or error})") from None
    except ValueError as error:
        raise ReportMergeError(f"{path}: not a JSON report ({error})") from None
    if not isinstance(document, dict) or "version" not in document:
        raise ReportMergeError(f"{path}: not a pytest-aoti report (no 'version')")
    version = document["version"]
    if version != REPORT_VERSION:
        raise ReportMergeError(
            f"{path}: report schema version {version!r}, this pytest-aoti reads version "
            f"{REPORT_VERSION}; merge with the pytest-aoti version that wrote it"
        )
    if not isinstance(document.get("checks"), list) or not isinstance(document.get("totals"), dict):
        raise ReportMergeError(f"{path}: report has no 'checks' list or 'totals' object")
    return document


def _sum_totals(totals: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Numbers summed, nested objects summed field by field, anything else from the first."""
    merged: dict[str, Any] = {}
    for item in totals:
        for name, value in item.items():
            if isinstance(value, bool) or value is None:
                merged.setdefault(name, value)
            elif isinstance(value, (int, float)):
                current = merged.get(name, 0)
                merged[name] = (current if isinstance(current, (int, float)) else 0) + value
            elif isinstance(value, Mapping):
                merged[name] = _sum_totals([merged.get(name) or {}, value])
            else:
                merged.setdefault(name, value)
    for name, value in merged.items():
        if isinstance(value, float):
            merged[name] = round(value, 3)
    return merged


def merge_reports(paths: Sequence[Path]) -> dict[str, Any]:
    """One report document made of the shards' reports at ``paths``."""
    if not paths:
        raise ReportMergeError("no report to merge: name the shards' --aoti-report files")
    documents = [load_report(Path(path)) for path in paths]
    checks = [check for document in documents for check in document["checks"]]
    totals = _sum_totals([document["totals"] for document in documents])
    # a program checked on two shards was counted by each; the checks say which it was
    programs = {check.get("program") for check in checks if check.get("program")}
    if programs:
        totals["programs"] = len(programs)
    first = documents[0]
    return {
        "version": REPORT_VERSION,
        "created": max(str(document.get("created", "")) for document in documents),
        "torch": first.get("torch"),
        "build": first.get("build"),
        "devices": sorted({d for document in documents for d in document.get("devices", [])}),
        "interrupted": any(bool(document.get("interrupted")) for document in documents),
        "merged_from": [str(path) for path in paths],
        "totals": totals,
        "checks": checks,
    }


def write_report(document: Mapping[str, Any], path: Path) -> None:
    """Write atomically, like a session's own report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(document, indent=2) + "\n")
    os.replace(partial, path)


def summary_lines(document: Mapping[str, Any], durations: int = 5) -> list[str]:
    """The terminal summary of a (merged) report: the slowest checks and the totals."""
    records = [CheckRecord.from_json(check) for check in document["checks"]]
    lines: list[str] = []
    if records and durations >= 0:
        title = "all AOTI checks" if durations == 0 else f"slowest {durations} AOTI checks"
        lines.append(f"aoti: {title}")
        lines += durations_table(records, durations)
    totals = document["totals"]
    count = int(totals.get("programs", 0))
    failed = sum(1 for record in records if record.outcome == "failed")
    lines.append(
        f"aoti: {len(records)} checks ({failed} failed) from {len(document.get('merged_from', []))} "
        f"reports; {count} program{'s' if count != 1 else ''}; "
        f"{totals.get('compiled', 0)} compiled in {float(totals.get('compile_seconds', 0)):.1f} s; "
        f"{totals.get('loaded', 0)} loaded from cache in "
        f"{float(totals.get('load_seconds', 0)):.2f} s"
    )
    remote = totals.get("remote")
    if isinstance(remote, Mapping):
        lines.append(
            f"aoti: remote cache: {remote.get('hits', 0)} hits, {remote.get('misses', 0)} "
            f"misses, {remote.get('uploads', 0)} uploads, {remote.get('rejected', 0)} rejected"
        )
    return lines
