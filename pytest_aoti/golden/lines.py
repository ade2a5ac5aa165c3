"""What the golden plugin writes in the summary. No torch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_aoti.golden.records import GoldenRecord


def summary_line(
    fields: Sequence[Mapping[str, Any] | None],
    findings: Sequence[Mapping[str, Any] | None],
    *,
    update: bool,
) -> str:
    """``golden: 12 records (recorded under torch 2.13.0); 12 packages load; 0 differ`` (or,
    with the update flag, how many were written and how many were unchanged)."""
    done = [field for field in fields if isinstance(field, Mapping)]
    differ = sum(
        1
        for finding in findings
        if isinstance(finding, Mapping) and finding.get("kind") == "golden"
    )
    if update:
        written = sum(1 for field in done if field.get("status") == "recorded")
        unchanged = sum(1 for field in done if field.get("status") == "unchanged")
        return f"golden: {written} records written, {unchanged} unchanged"
    torches = sorted({str(field.get("recorded_torch")) for field in done})
    under = f" (recorded under torch {', '.join(torches)})" if torches else ""
    loaded = sum(1 for field in done if field.get("package") == "loaded")
    return f"golden: {len(done) + differ} records{under}; {loaded} packages load; {differ} differ"


def unused_lines(unused: Sequence[GoldenRecord], *, deleted: bool, flag: str) -> list[str]:
    """The records of tests that no longer exist, and what became of them."""
    head = (
        f"golden: {len(unused)} unused records deleted"
        if deleted
        else f"golden: {len(unused)} unused records ({flag} deletes them after a full run)"
    )
    return [head, *(f"  {record.folder.name}: {record.label}" for record in unused)]
