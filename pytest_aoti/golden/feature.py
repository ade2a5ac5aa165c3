"""Golden records, declared: their session options, record field and JUnit properties.
Pure data without torch; the records are :mod:`.records`, the check :mod:`.check`, the hooks
:mod:`.plugin`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_aoti.api import Feature, FindingKind, Option, ValueKind, session_field

UPDATE_FLAG = "--aoti-golden-update"


@dataclass(frozen=True)
class GoldenSettings:
    """The session options of golden records."""

    golden: str | None = session_field(
        Option(
            "aoti-golden",
            str,
            None,
            "Folder of golden records: each passing check is compared with its record there "
            "(the recorded package loaded under this torch, this torch's eager and this run's "
            f"engine, each against what was recorded); {UPDATE_FLAG} writes them. A folder "
            "of the project's own files, reviewed like its code. Default: none.",
            path="location",
        )
    )
    golden_package_limit: int = session_field(
        Option(
            "aoti-golden-package-limit",
            ValueKind.BYTES.parse,
            64 * 2**20,
            "Largest package a golden record keeps (4GiB, 500MB, bytes); a larger one is "
            "recorded by its digest and the path it was written to, where the check expects "
            "it. Default: 64MiB.",
        )
    )
    golden_update: bool = session_field(
        Option(
            "aoti-golden-update",
            ValueKind.SWITCH.parse,
            False,
            "Write (or rewrite, where changed) the golden record of each passing check under "
            "--aoti-golden, and after a run that collected every test, delete the records of "
            "tests that no longer exist.",
            ini=None,
            flag=True,
        )
    )


def golden_properties(fields: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``aoti_golden``: ``recorded``, ``unchanged``, ``matched`` (with the recorded torch)."""
    record = fields.get("golden")
    if not isinstance(record, Mapping):
        return []
    return [
        ("aoti_golden", record.get("status")),
        ("aoti_golden_recorded_torch", record.get("recorded_torch")),
    ]


GOLDEN_KIND = FindingKind("golden")
"""The kind of this feature's failures (its ``Feature``'s ``kinds`` say what it means)."""


GOLDEN = Feature(
    "golden",
    "Golden records: passing engines recorded, then checked on the next torch (the upgrade gate)",
    settings=GoldenSettings,
    record_fields={"golden": None},
    properties=golden_properties,
    kinds={GOLDEN_KIND: "an answer differs from the check's golden record, or it has none"},
)
"""``golden`` in every JSON record: None where no golden folder was given; else ``status``
(``recorded``, ``unchanged`` or ``matched``), ``folder``, ``recorded_torch``, ``torch``,
``package`` (``loaded`` or why not), and ``max_abs`` of each comparison (``package``,
``eager``, ``engine``)."""
