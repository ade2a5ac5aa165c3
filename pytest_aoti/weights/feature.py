"""Swapped weights, declared: their option, record field and JUnit properties.

Pure data without torch; the check is :mod:`.check`, the weight sets :mod:`.draws`, the
findings' text :mod:`.hazards`, its hooks :mod:`.plugin`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_aoti.api import BundleAdapter, Feature, FindingKind, ValueKind, per_check

WEIGHTS_MODES = ValueKind.words("swap", "report", "off", quoted=True)
"""What the weights check does after parity on the example: load new weight sets into the
engine and compare it with eager holding the same weights, a weight the engine cannot take
failing the check (``swap``) or listed as a deployment hazard (``report``); or nothing
(``off``)."""


@dataclass(frozen=True)
class WeightsOptions:
    """The per-check option of swapped weights."""

    weights: str = per_check(
        "report",
        "After parity on the example, load new weight sets (each weight of the state dict in "
        "its own dtype, shape and range) into the engine with load_constants and compare it "
        "with eager holding the same weights: a weight the engine cannot take (folded into "
        "the compiled code, refused, or accepted and ignored) is a deployment hazard in the "
        "summary (report), fails the check (swap), or nothing runs (off). Default: report.",
        kind=WEIGHTS_MODES,
        marker=True,
        keyword=True,
    )


def weights_properties(fields: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The JUnit properties of a check's weight swap: the sets compared and the weights
    the engine cannot take; none where the check did not run."""
    part = fields.get("weights")
    if not isinstance(part, Mapping) or part.get("skipped"):
        return []
    names = [str(found.get("weight")) for found in part.get("findings") or ()]
    properties: list[tuple[str, Any]] = [
        ("aoti_weights_sets", part.get("ran", 0)),
        ("aoti_weights_findings", len(names)),
    ]
    if names:
        properties.append(("aoti_weights_cannot_swap", ", ".join(names)))
    return properties


def _weights_target(finding: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A weight set's failure reproduces as the difference it made (the bundle loads the
    set into the engine first); one that measured none, as nothing."""
    difference = ((finding.get("extra") or {}).get("weights") or {}).get("difference")
    if not isinstance(difference, Mapping):
        return None
    return {"kind": str(difference.get("kind", "")), "location": difference.get("location") or ""}


WEIGHTS_KIND = FindingKind("weights")
"""The kind of this feature's failures (its ``Feature``'s ``kinds`` say what it means)."""


WEIGHTS = Feature(
    "weights",
    "Swapped weights: new weight sets loaded into the engine with load_constants, compared "
    "with eager holding the same weights",
    options=WeightsOptions,
    record_fields={"weights": None},
    properties=weights_properties,
    kinds={WEIGHTS_KIND: "the engine cannot take a weight set the module takes"},
    bundle=BundleAdapter(_weights_target),
)
"""``weights`` in every JSON record (None where the check did not run): the mode, the
sets planned and compared and why they stopped, the weights swapped and kept, the
engine's constants, and each weight the engine cannot take (``findings``)."""
