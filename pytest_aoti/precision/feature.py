"""The precision report, declared: its option and record field. Pure data without torch."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_aoti.api import Feature, FindingKind, ValueKind, per_check

PRECISION_MODES = ValueKind.words("report", "fail", quoted=True)
"""What a check does where eager rounds to its dtype and the engine does not (the fp64 rule
sides with the engine): ``report`` it (the record and the summary), or ``fail``."""


@dataclass(frozen=True)
class PrecisionOptions:
    """The per-check option of the precision report."""

    precision: str = per_check(
        "report",
        "Where an output differs from eager beyond its tolerance and the float64 reference "
        "sides with the engine (eager rounds to float16 or bfloat16 where the engine keeps "
        "float32): report it in the record and the summary, or fail the check. "
        "Default: report.",
        kind=PRECISION_MODES,
        marker=True,
        keyword=True,
    )


PRECISION_KIND = FindingKind("precision")
"""The kind of this feature's failures (its ``Feature``'s ``kinds`` say what it means)."""


PRECISION = Feature(
    "precision",
    "Precision: where eager rounds to its dtype and the engine does not, reported or failed",
    options=PrecisionOptions,
    record_fields={"precision": []},
    kinds={PRECISION_KIND: "eager rounds where the engine does not (fp64 sides with it)"},
)
"""``precision`` in every JSON record: ``location``, ``context``, ``dtype``, ``elements``,
``max_abs`` of each place eager rounds apart from the engine."""
