"""Triage, declared: its options (see :class:`~pytest_aoti.options.feature.Feature`).

Triage explains every failed check (the stage, the diverging node, the repro bundle): it
adds no check, it answers the ``pytest_aoti_triage`` and ``pytest_aoti_failure_bundle``
hooks (:mod:`.plugin`) the runner and the session ask on every failure. Pure data
without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pytest_aoti.api import Feature, Option, ValueKind, per_check, session_field


@dataclass(frozen=True)
class TriageOptions:
    """The per-check option of triage."""

    localize: bool = per_check(
        True,
        "When the AOTI compile broke a check, compile one instrumented program to name the "
        "first diverging graph node and its source line: on or off. Default: on.",
        kind=ValueKind.SWITCH,
        marker=True,
    )


@dataclass(frozen=True)
class TriageSettings:
    """The session option of triage: where repro bundles go."""

    keep_failed: Path | None = session_field(
        Option(
            "aoti-keep-failed",
            str,
            None,
            "Directory where each failing check leaves a repro bundle (exported program, "
            "inputs, package, finding, and a repro.py that needs only torch). Default: none.",
            path="dir",
        )
    )


TRIAGE = Feature(
    "triage",
    "Triage: the stage a failure arose in, the first diverging graph node and the repro bundle",
    options=TriageOptions,
    settings=TriageSettings,
)
