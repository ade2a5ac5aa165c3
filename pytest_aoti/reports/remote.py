"""What the terminal and the JSON report say about the fleet's remote store
(:mod:`pytest_aoti.compiling.remote`): the header line, the summary line and the totals.

The session calls each with one line; figures are ``{"remote": RemoteStats.to_json()}`` of
this process and of every xdist worker (carried in the worker's payload,
:meth:`~pytest_aoti.reports.collector.ReportCollector.payload`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_aoti.compiling.remote import READ_ONLY_PROTOCOLS, RemoteStats, protocol_of

__all__ = ["remote_header_line", "remote_summary_lines", "remote_totals"]


def remote_totals(url: str | None, figures: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``{"remote": {...}}``: the remote figures of this process and every xdist worker,
    summed, for the JSON report's totals; empty without a remote store."""
    if not url:
        return {}
    total = RemoteStats()
    for item in figures:
        total.merge(item.get("remote") or {})
    return {"remote": total.to_json()}


def remote_summary_lines(url: str | None, figures: Sequence[Mapping[str, Any]]) -> list[str]:
    """``aoti: remote cache s3://…: 3 hits (2.1 MB in 0.4 s), 1 miss, 1 upload …``."""
    if not url or not any(item.get("remote") for item in figures):
        return []
    t = RemoteStats()
    for item in figures:
        t.merge(item.get("remote") or {})
    if not (t.hits or t.misses or t.rejected or t.uploads or t.failures):
        return []
    parts = [
        f"{t.hits} hit{'s' * (t.hits != 1)} ({_mb(t.bytes_down)} in {t.seconds_down:.2f} s)",
        f"{t.misses} miss{'es' * (t.misses != 1)}",
        f"{t.uploads} upload{'s' * (t.uploads != 1)} ({_mb(t.bytes_up)} in {t.seconds_up:.2f} s)",
    ]
    if t.rejected:
        parts.append(f"{t.rejected} rejected")
    if t.failures:
        parts.append(f"{t.failures} failed call{'s' * (t.failures != 1)}")
    return [f"aoti: remote cache {url}: " + ", ".join(parts)]


def remote_header_line(url: str | None, mode: str, ini_trusted: Sequence[str]) -> str | None:
    """What the run does with the store, and which key is missing for the rest, read from
    the environment without loading any key."""
    from pytest_aoti.compiling.signing import SIGNING_KEY_ENV, TRUSTED_KEYS_ENV

    if not url:
        return None
    if mode == "off":
        return f"aoti: remote cache {url}: off"
    signing = bool(os.environ.get(SIGNING_KEY_ENV, "").strip())
    trusted = signing or bool(os.environ.get(TRUSTED_KEYS_ENV, "").strip()) or bool(ini_trusted)
    notes = []
    if not trusted:
        notes.append(f"loads nothing: no trusted key ({TRUSTED_KEYS_ENV})")
    if mode == "readwrite" and protocol_of(url) in READ_ONLY_PROTOCOLS:
        notes.append("publishes nothing: read-only protocol")
    elif mode == "readwrite" and not signing:
        notes.append(f"publishes nothing: no signing key ({SIGNING_KEY_ENV})")
    return f"aoti: remote cache {url} ({mode})" + (f"; {'; '.join(notes)}" if notes else "")


def _mb(size: int) -> str:
    return f"{size / 2**20:.1f} MB"
