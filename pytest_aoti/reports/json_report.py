"""The JSON report (``--aoti-report=PATH``), written atomically; docs/reports.md lists each
:data:`REPORT_VERSION`'s changes."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pytest_aoti.reports.header import torch_build, torch_version
from pytest_aoti.reports.records import CheckRecord, CompileRecord

REPORT_VERSION = 2
"""The report format's version; docs/reports.md lists what each changed and what was added since."""


def report_document(
    records: Sequence[CheckRecord],
    *,
    devices: Sequence[str],
    totals: Mapping[str, Any],
    interrupted: bool = False,
    compiles: Sequence[CompileRecord] = (),
    created: str | None = None,
    torch: str | None = None,
    build: str | None = None,
) -> dict[str, Any]:
    """The report's document; ``created``, ``torch`` and ``build`` default to this run's."""
    return {
        "version": REPORT_VERSION,
        "created": created or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "torch": torch or torch_version(),
        "build": build or torch_build(),
        "devices": list(devices),
        "interrupted": interrupted,
        "totals": dict(totals),
        "checks": [record.to_json() for record in records],
        "compiles": [record.to_json() for record in compiles],
    }


def write_report_document(path: Path, document: Mapping[str, Any]) -> None:
    """Write a report document atomically: to a temporary name, then renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(document, indent=2, default=str) + "\n")
    os.replace(partial, path)
