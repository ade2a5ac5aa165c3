"""Generated shapes, declared: their options (see :class:`~pytest_aoti.options.feature.Feature`).

Pure data without torch; the check is :mod:`.check`, its hooks :mod:`.plugin`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_aoti.api import (
    BundleAdapter,
    Feature,
    FindingKind,
    ValueKind,
    per_check,
)

DEFAULT_EXAMPLES = 20
DEFAULT_MAX_DIM = 64


@dataclass(frozen=True)
class GeneratedOptions:
    """The per-check options of generated shapes."""

    examples: int = per_check(
        DEFAULT_EXAMPLES,
        "Generated input shapes per dynamic-shape check; 0 turns generation off. "
        f"Default: {DEFAULT_EXAMPLES}.",
        kind=ValueKind.NON_NEGATIVE,
        marker=True,
        keyword=True,
    )
    max_dim: int = per_check(
        DEFAULT_MAX_DIM,
        "Largest size drawn for a generated dim, and the cap of unbounded ranges. "
        f"Default: {DEFAULT_MAX_DIM}.",
        kind=ValueKind.COUNT,
        marker=True,
    )


def _shape_target(finding: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A generated shape's failure reproduces as the difference found on it."""
    inner = (finding.get("extra") or {}).get("inner_kind")
    return {"kind": str(inner), "location": finding.get("location") or ""} if inner else None


SHAPE_KIND = FindingKind("shape")
"""The kind of this feature's failures (its ``Feature``'s ``kinds`` say what it means)."""


GENERATED = Feature(
    "generated",
    "Generated shapes: Hypothesis draws input shapes inside the exported ranges and each "
    "is compared with eager on the one engine",
    options=GeneratedOptions,
    kinds={SHAPE_KIND: "a generated input shape fails"},
    bundle=BundleAdapter(_shape_target),
)
