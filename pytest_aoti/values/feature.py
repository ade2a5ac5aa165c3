"""Generated values, declared: their options (see :class:`~pytest_aoti.options.feature.Feature`).

Pure data without torch; the check is :mod:`.check`, the values :mod:`.draws`, its hooks
:mod:`.plugin`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_aoti.api import (
    Feature,
    ValueKind,
    per_check,
)

VALUES_MODES = ValueKind.words("domain", "edge", "off")
"""What the values check does after parity on the example: draws inside each input's range
(``domain``; edge values are then deployment hazards, reported), those and a check that
fails on edge values too (``edge``), or nothing (``off``)."""
DEFAULT_DRAWS = 16


def check_values_skip(keyword: str, value: Any) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str) or not all(isinstance(name, str) for name in value):
        raise ValueKind.Problem(f"{keyword}= takes a set of input names, e.g. {{'positions'}}")
    return frozenset(value)


@dataclass(frozen=True)
class ValuesOptions:
    """The per-check options of generated values."""

    values: str = per_check(
        "domain",
        "After parity on the example, compare eager and the engine on input sets of the "
        "example's shapes, dtypes and layouts with values of their own inside each input's "
        "range, mixed with exact decimals, halves, integers, signed zeros, the range's ends "
        "and repeated values; edge values (NaN, infinities, magnitudes near overflow and "
        "of 1e10 and more) run as deployment probes and are reported (domain), or also fail "
        "the check (edge), or none of it (off). Default: domain.",
        kind=VALUES_MODES,
        marker=True,
        keyword=True,
    )
    values_draws: int = per_check(
        DEFAULT_DRAWS,
        f"Input sets of generated values per check (0: none). Default: {DEFAULT_DRAWS}.",
        kind=ValueKind.NON_NEGATIVE,
        marker=True,
        keyword=True,
    )
    values_skip: frozenset[str] | None = per_check(
        None,
        "Inputs whose values the values check keeps as the example's and that get no edge "
        "values (a set of input names, e.g. {'positions'}: inputs whose meaning is in their "
        "exact values).",
        check=check_values_skip,
        marker=True,
        keyword=True,
    )


VALUES = Feature(
    "values",
    "Generated values: the example's shapes with values of their own, each input set "
    "compared with eager on the one engine",
    options=ValuesOptions,
    record_fields={"values": None},
)
