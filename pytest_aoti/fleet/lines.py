"""What the terminal and the JSON report say about the fleet's remote store
(:mod:`pytest_aoti.fleet.store`): the header line, the summary line and the totals.

The session calls each with one line; figures are ``{"remote": RemoteStats.to_json()}`` of
this process and of every xdist worker (carried in the worker's payload,
:func:`~pytest_aoti.hookspecs.pytest_aoti_figures`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from importlib.util import find_spec
from typing import Any

from pytest_aoti.api import AotiUsageError
from pytest_aoti.fleet.open import not_before_time
from pytest_aoti.fleet.redact import redact
from pytest_aoti.fleet.signing import SIGNING_KEY_ENV, TRUSTED_KEYS_ENV
from pytest_aoti.fleet.store import READ_ONLY_PROTOCOLS, RemoteStats, protocol_of

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


def remote_summary_lines(
    url: str | None,
    figures: Sequence[Mapping[str, Any]],
    *,
    mode: str = "readwrite",
    ini_trusted: Sequence[str] = (),
    not_before: float | None = None,
) -> list[str]:
    """``aoti: remote cache s3://…: 3 hits (2.1 MB in 0.4 s), 1 miss, 1 upload …``, and
    the line that says why the store loads or publishes nothing, if it does not (shown
    under ``-q`` too, where the header is not)."""
    if not url or mode == "off":
        return []
    shown = redact(url)
    lines = []
    notes = remote_notes(url, mode, ini_trusted, not_before)
    if notes:
        lines.append(f"aoti: remote cache {shown} ({mode}): {'; '.join(notes)}")
    t = RemoteStats()
    for item in figures:
        t.merge(item.get("remote") or {})
    if not (t.hits or t.misses or t.rejected or t.uploads or t.failures):
        return lines
    parts = [
        f"{t.hits} hit{'s' * (t.hits != 1)} ({_mb(t.bytes_down)} in {t.seconds_down:.2f} s)",
        f"{t.misses} miss{'es' * (t.misses != 1)}",
        f"{t.uploads} upload{'s' * (t.uploads != 1)} ({_mb(t.bytes_up)} in {t.seconds_up:.2f} s)",
    ]
    if t.rejected:
        parts.append(f"{t.rejected} rejected")
    if t.failures:
        parts.append(f"{t.failures} failed call{'s' * (t.failures != 1)}")
    if t.timeouts:
        parts.append(f"{t.timeouts} past {'their' if t.timeouts != 1 else 'its'} deadline")
    return [*lines, f"aoti: remote cache {shown}: " + ", ".join(parts)]


def remote_notes(
    url: str,
    mode: str,
    ini_trusted: Sequence[str],
    not_before: float | None = None,
    now: float | None = None,
) -> list[str]:
    """Why a configured store loads nothing or publishes nothing, read from the
    environment without loading any key: ``["loads nothing: no trusted key (…)"]``.
    ``not_before``: ``--aoti-cache-not-before`` (else its variable's); a time after ``now``
    refuses every entry."""
    signing = bool(os.environ.get(SIGNING_KEY_ENV, "").strip())
    trusted = signing or bool(os.environ.get(TRUSTED_KEYS_ENV, "").strip()) or bool(ini_trusted)
    future = _future_not_before(not_before, time.time() if now is None else now)
    notes = []
    if find_spec("cryptography") is None:
        return ["loads and publishes nothing: the 'cryptography' package is not installed"]
    if not trusted:
        notes.append(f"loads nothing: no trusted key ({TRUSTED_KEYS_ENV})")
    elif future:
        notes.append(f"loads nothing: the not-before time {future} is in the future")
    if mode == "readwrite" and protocol_of(url) in READ_ONLY_PROTOCOLS:
        notes.append("publishes nothing: read-only protocol")
    elif mode == "readwrite" and not signing:
        notes.append(f"publishes nothing: no signing key ({SIGNING_KEY_ENV})")
    return notes


def remote_header_line(
    url: str | None, mode: str, ini_trusted: Sequence[str], not_before: float | None = None
) -> str | None:
    """What the run does with the store, and which key is missing for the rest."""
    if not url:
        return None
    shown = redact(url)
    if mode == "off":
        return f"aoti: remote cache {shown}: off"
    notes = remote_notes(url, mode, ini_trusted, not_before)
    return f"aoti: remote cache {shown} ({mode})" + (f"; {'; '.join(notes)}" if notes else "")


def _future_not_before(given: float | None, now: float) -> str | None:
    """The not-before time as ``2027-01-01T00:00:00Z`` where it is after ``now``: every
    entry was signed earlier, so every one is refused."""

    try:
        moment = not_before_time(given)
    except AotiUsageError:  # opening the store says so, as a usage error
        return None
    if moment is None or moment <= now:
        return None
    return datetime.fromtimestamp(moment, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _mb(size: int) -> str:
    return f"{size / 2**20:.1f} MB"
