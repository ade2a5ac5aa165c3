"""Precision the engine does not round away: said, never silent.

Where an output (or a mutated input or buffer) differs from eager beyond its tolerance and
the float64 reference is closer to the engine than to eager, the fp64 rule passes it: eager
rounds where the engine does not. For float16 and bfloat16 that is Inductor keeping float32
between ops where eager rounds each op to the tensor's dtype; ``floor``, comparisons or
``argmax`` downstream turn the last bit into a whole unit. A check that saw it says so in
its record and the summary (``precision="report"``, the default) or fails
(``precision="fail"``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pytest_aoti.api import (
    AotiCheckError,
    CheckContext,
    CheckPlan,
    Finding,
    Outcome,
    Phase,
    RecordPart,
)
from pytest_aoti.precision.feature import PRECISION_KIND, PrecisionOptions

if TYPE_CHECKING:
    from pytest_aoti.api import Comparison

EMULATE = "inductor_configs={'emulate_precision_casts': True}"
"""The Inductor option that makes the engine round each op to float16/bfloat16 as eager does
(measured: it removes the difference of an fp16 cos, an exp chain and a bf16 rotary
embedding; not of a Python scalar operand, which eager rounds to the tensor's dtype)."""

_LOW_PRECISION = ("torch.float16", "torch.bfloat16")


class PrecisionCheck:
    """Every compared leaf of the checks before it (the example, samples, generated shapes
    and values): where eager rounds apart from the engine, said in the record and the
    summary, or the check's failure with ``precision="fail"``."""

    name = "precision"
    figures = ()  # a finding of its own kind: the check's name is not added to it
    phase: Phase = "engine"

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        return bool(context.stats)

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        __tracebackhide__ = True
        mode = plan.options.of(PrecisionOptions).precision
        return Outcome(record=precision_part(context.stats, mode))


def precision_findings(stats: Iterable[tuple[str, Comparison.LeafStats]]) -> list[dict[str, Any]]:
    """One entry per location whose elements eager rounds apart from the engine: where
    (``location``, ``context``), its ``dtype``, how many ``elements`` and ``max_abs``."""
    found: dict[str, dict[str, Any]] = {}
    for context, leaf in stats:
        if not leaf.rounded_apart:
            continue
        entry = found.get(leaf.location)
        if entry is None or leaf.rounded_apart > entry["elements"]:
            found[leaf.location] = {
                "location": leaf.location,
                "context": context,
                "dtype": leaf.dtype,
                "elements": leaf.rounded_apart,
                "max_abs": leaf.max_abs,
            }
    return list(found.values())


def describe(entry: dict[str, Any]) -> str:
    """``output: the engine keeps float32 where eager rounds to torch.float16: …``."""
    where = entry["location"] + (f" ({entry['context']})" if entry["context"] else "")
    count = f"{entry['elements']} element(s) differ, max abs {entry['max_abs']:.3g}"
    if entry["dtype"] in _LOW_PRECISION:
        return (
            f"{where}: the engine keeps float32 where eager rounds to "
            f"{entry['dtype'].removeprefix('torch.')}: {count}; "
            f"{EMULATE} makes it round as eager does"
        )
    return (
        f"{where}: eager and the engine round differently and the engine is closer to "
        f"float64: {count}"
    )


def precision_part(stats: Iterable[tuple[str, Comparison.LeafStats]], mode: str) -> RecordPart:
    """The check's precision record (``precision`` in JSON, a summary note per location);
    with ``mode`` ``"fail"``, the failure of the first location instead."""
    __tracebackhide__ = True
    entries = precision_findings(stats)
    if not entries:
        return RecordPart()
    if mode == "fail":
        first = entries[0]
        raise AotiCheckError(
            Finding(
                kind=PRECISION_KIND,
                location=first["location"],
                summary="",
                message=f"precision: {describe(first)}",
                context=first["context"],
                details=tuple(f"also {describe(entry)}" for entry in entries[1:]),
                notes=(
                    "the float64 reference sides with the engine: eager rounds where the engine "
                    "does not; precision='report' passes it and says so",
                ),
                extra={"precision": entries},
            )
        )
    return RecordPart(
        {"precision": entries},
        notes=tuple(
            f"precision: {describe(entry)} (precision='fail' fails it)" for entry in entries
        ),
    )
