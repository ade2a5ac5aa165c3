"""The JSON report (``--aoti-report=PATH``): one document per run, written atomically.

Its layout is versioned by :data:`REPORT_VERSION`; the README's "Reports" section lists
what each version changed.
"""

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
"""2: ``finding.stage`` is the stage that failed (``decompose`` for run_decompositions),
null where none applies; ``compiles`` lists ``aoti.compile`` calls; checks carry
``check_index`` and ``fp64_rescued``; ``engine_over_eager`` is null where a call is too
short to time."""


def write_json_report(
    path: Path,
    records: Sequence[CheckRecord],
    *,
    devices: Sequence[str],
    totals: Mapping[str, Any],
    interrupted: bool = False,
    compiles: Sequence[CompileRecord] = (),
) -> None:
    """Write the report atomically (a reader never sees half a file)."""
    document = {
        "version": REPORT_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "torch": torch_version(),
        "build": torch_build(),
        "devices": list(devices),
        "interrupted": interrupted,
        "totals": dict(totals),
        "checks": [record.to_json() for record in records],
        "compiles": [record.to_json() for record in compiles],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(document, indent=2, default=_json_default) + "\n")
    os.replace(partial, path)


def _json_default(value: Any) -> Any:
    return str(value)
