"""The memory check, declared: its option, record fields and JUnit property. Pure data
without torch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_aoti.api import Feature, FindingKind, ValueKind, per_check


@dataclass(frozen=True)
class MemoryOptions:
    """The per-check option of the memory check."""

    max_extra_bytes: int | None = per_check(
        None,
        "Device memory one engine call of the example may allocate beyond what was "
        "allocated before it (CUDA only; None: not checked).",
        check=ValueKind.BYTES.check,
        keyword=True,
    )


def memory_properties(fields: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``aoti_extra_bytes`` where it was measured."""
    measured = fields.get("extra_bytes")
    return [] if measured is None else [("aoti_extra_bytes", measured)]


MEMORY_KIND = FindingKind("memory")
"""The kind of this feature's failures (its ``Feature``'s ``kinds`` say what it means)."""


MEMORY = Feature(
    "memory",
    "Memory: the device memory one engine call allocates, against max_extra_bytes",
    options=MemoryOptions,
    record_fields={"extra_bytes": None, "extra_bytes_unmeasured": False},
    properties=memory_properties,
    kinds={MEMORY_KIND: "an engine call allocated more than max_extra_bytes"},
)
"""``extra_bytes``: the most device memory one engine call allocated, where measured;
``extra_bytes_unmeasured``: asked for on a device whose memory is not measured (CPU)."""
