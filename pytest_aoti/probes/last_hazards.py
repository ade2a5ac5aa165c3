"""What the last run's deployment hazards were, kept in the plugin's cache directory.

A warm run whose probe outcomes all came from the cache would print the same hazards
again; the terminal collapses a program's hazards into one line when its outcomes came
from the cache and did not change since a run last showed them. The file lives in the
plugin's own cache directory (``--aoti-cache-dir``, else ``.pytest_cache/d/aoti``), so it
works with ``-p no:cacheprovider``; only the process that prints the summary (the xdist
controller) reads and writes it. Entries of programs a run did not probe are kept, so a
``-k`` subset forgets nothing; the oldest go beyond :data:`MAX_PROGRAMS`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_aoti.api import replace_text

FILE_NAME = "hazards-last-run.json"
_FORMAT = 1
MAX_PROGRAMS = 5000
"""Programs remembered; the least recently probed beyond this are forgotten."""


def outcomes_digest(probes: Sequence[Mapping[str, Any]]) -> str:
    """What a program's probes said, as a short digest (figures left out: the cached
    outcomes of a warm run repeat them exactly, and a new compile may move them a little)."""
    described = sorted(
        (
            str(probe.get("input")),
            str(probe.get("variant")),
            str(probe.get("outcome")),
            str(probe.get("refused_with_checks")),
        )
        for probe in probes
    )
    return hashlib.sha256(json.dumps(described).encode()).hexdigest()[:24]


def read_last(root: Path | None) -> dict[str, str]:
    """``{slot: digest}`` of the last runs (empty when there is none or it is unreadable)."""
    if root is None:
        return {}
    try:
        data = json.loads((root / FILE_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        return {}
    programs = data.get("programs")
    if not isinstance(programs, dict):
        return {}
    return {
        str(slot): str(entry.get("digest"))
        for slot, entry in programs.items()
        if isinstance(entry, dict)
    }


def keep(root: Path | None, shown: Mapping[str, str]) -> None:
    """Remember ``shown`` (``{slot: digest}``) over the last runs' entries; atomic, and
    never failing a run: the memory is a courtesy."""
    if root is None or not shown:
        return
    path = root / FILE_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        programs = data.get("programs") if isinstance(data, dict) else None
    except (OSError, ValueError):
        programs = None
    if not isinstance(programs, dict) or data.get("format") != _FORMAT:
        programs = {}
    now = time.time()
    for slot, digest in shown.items():
        programs[slot] = {"digest": digest, "seen": now}
    if len(programs) > MAX_PROGRAMS:

        def seen(item: tuple[str, Any]) -> float:
            entry = item[1]
            return float(entry.get("seen", 0)) if isinstance(entry, dict) else 0.0

        programs = dict(sorted(programs.items(), key=seen)[-MAX_PROGRAMS:])

    try:
        root.mkdir(parents=True, exist_ok=True)
        replace_text(path, json.dumps({"format": _FORMAT, "programs": programs}))
    except OSError:
        pass  # what a run showed is a convenience: the next run shows everything again
