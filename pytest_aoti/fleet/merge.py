"""Merge the ``--aoti-report`` files of CI shards into one report of the whole fleet run.

``python -m pytest_aoti merge-reports shard-*.json -o all.json`` reads each shard's
report, refuses one of another schema version, and merges them the way the xdist
controller merges its workers: each shard becomes one :meth:`ReportCollector.merge`
payload (checks, compiles, compile figures, remote figures). It prints the same
durations table a single run prints.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_aoti.api import CheckRecord, ProgramRegistry, ReportCollector
from pytest_aoti.fleet.store import RemoteStats

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
    if version != ReportCollector.VERSION:
        raise ReportMergeError(
            f"{path}: report schema version {version!r}, this pytest-aoti reads version "
            f"{ReportCollector.VERSION}; merge with the pytest-aoti version that wrote it"
        )
    if not isinstance(document.get("checks"), list) or not isinstance(document.get("totals"), dict):
        raise ReportMergeError(f"{path}: report has no 'checks' list or 'totals' object")
    if not isinstance(document.get("compiles", []), list):
        raise ReportMergeError(f"{path}: report's 'compiles' is not a list")
    return document


def shard_payload(document: Mapping[str, Any]) -> dict[str, Any]:
    """A shard's report as the payload an xdist worker sends (:meth:`ReportCollector.payload`).

    A report counts its programs; the payload names them, taken from the checks and
    compiles, so that a program used on two shards is counted once."""
    checks = document["checks"]
    compiles = document.get("compiles", [])
    programs = sorted({str(r["program"]) for r in [*checks, *compiles] if r.get("program")})
    payload: dict[str, Any] = {
        "records": checks,
        "compiles": compiles,
        "stats": {**document["totals"], "programs": programs},
    }
    remote = document["totals"].get("remote")
    if isinstance(remote, Mapping):
        payload["figures"] = {"remote": remote}
    return payload


def _sum_remote(figures: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The shards' remote figures summed, with the fields they report."""
    total = RemoteStats()
    for item in figures:
        total.merge(item)
    present = {name for item in figures for name in item}
    return {name: value for name, value in total.to_json().items() if name in present}


def merge_reports(paths: Sequence[Path]) -> dict[str, Any]:
    """One report document made of the shards' reports at ``paths``."""
    if not paths:
        raise ReportMergeError("no report to merge: name the shards' --aoti-report files")
    documents = [load_report(Path(path)) for path in paths]
    collector = ReportCollector()
    for path, document in zip(paths, documents):
        try:
            collector.merge(shard_payload(document))
        except (LookupError, TypeError, ValueError) as error:
            raise ReportMergeError(
                f"{path}: a check or compile of the report is not readable "
                f"({type(error).__name__}: {error})"
            ) from None
    totals: dict[str, Any] = collector.totals(None).to_json()
    remote = [item["remote"] for item in collector.worker_figures if "remote" in item]
    if remote:
        totals["remote"] = _sum_remote(remote)
    first = documents[0]
    merged = collector.document(
        devices=sorted({d for document in documents for d in document.get("devices", [])}),
        totals=totals,
        interrupted=any(bool(document.get("interrupted")) for document in documents),
        created=max(str(document.get("created", "")) for document in documents) or None,
        torch=first.get("torch"),
        build=first.get("build"),
    )
    merged["merged_from"] = [str(path) for path in paths]
    return merged


def write_report(document: Mapping[str, Any], path: Path) -> None:
    """Write atomically, like a session's own report."""
    ReportCollector.write(path, document)


def summary_lines(document: Mapping[str, Any], durations: int = 5) -> list[str]:
    """The terminal summary of a (merged) report: the slowest checks and the totals."""
    records = [CheckRecord.from_json(check) for check in document["checks"]]
    lines: list[str] = []
    if records and durations >= 0:
        title = "all AOTI checks" if durations == 0 else f"slowest {durations} AOTI checks"
        lines.append(f"aoti: {title}")
        lines += ReportCollector(records=records).durations_table(durations)
    totals = document["totals"]
    failed = sum(1 for record in records if record.outcome == "failed")
    # the terminal's own compile figures line, of the programs the checks and compiles name
    figures = ProgramRegistry.CompileStats.from_payload(
        shard_payload(document)["stats"]
    ).summary_line()
    lines.append(
        f"aoti: {len(records)} checks ({failed} failed) from "
        f"{len(document.get('merged_from', []))} reports; "
        + (figures.removeprefix("aoti: ") or "no programs")
    )
    remote = totals.get("remote")
    if isinstance(remote, Mapping):
        lines.append(
            f"aoti: remote cache: {remote.get('hits', 0)} hits, {remote.get('misses', 0)} "
            f"misses, {remote.get('uploads', 0)} uploads, {remote.get('rejected', 0)} rejected"
        )
    return lines
