"""Deployment probes, declared: their options, their session option, their record fields.

Pure data without torch (see :class:`~pytest_aoti.options.feature.Feature`); the probes
themselves are :mod:`.check`, their hooks :mod:`.plugin`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pytest_aoti.api import (
    BundleAdapter,
    Feature,
    FindingKind,
    Option,
    ValueKind,
    per_check,
    session_field,
)

PROBE_POLICIES = ValueKind.words("off", "report", "fail")
"""What deployment probes do after a passing check."""

HAZARD_VIEWS = ValueKind.words("summary", "all")
"""How the terminal lists deployment hazards."""


class ProbeVariant(str, Enum):
    """The kind of a deployment-probe variant (a probe's ``kind``; ``probes_skip`` names
    them). A str: JSON writes ``"dtype"`` and f-strings print it."""

    CHANNELS_LAST = "channels_last"
    CHANNELS_LAST_3D = "channels_last_3d"
    PERMUTED = "permuted"
    STRIDED_SLICE = "strided_slice"
    STORAGE_OFFSET = "storage_offset"
    SIZE = "size"
    DTYPE = "dtype"
    DEVICE = "device"
    SCALAR = "scalar"
    ALIASED = "aliased"
    VALUES = "values"  # edge values: NaN, infinities, magnitudes near overflow

    def __str__(self) -> str:
        return self.value

    def __format__(self, format_spec: str) -> str:
        return self.value.__format__(format_spec)


PROBE_LAYOUT_KINDS = (
    ProbeVariant.CHANNELS_LAST,
    ProbeVariant.CHANNELS_LAST_3D,
    ProbeVariant.PERMUTED,
    ProbeVariant.STRIDED_SLICE,
    ProbeVariant.STORAGE_OFFSET,
)
PROBE_KINDS = tuple(ProbeVariant)
"""The kinds of deployment-probe variants; ``probes_skip`` names these."""


def probes_skip_problem(name: str, value: Any) -> str:
    """What is wrong with a ``probes_skip`` value: a set of kinds (``"*"``: all), or a
    dict of input name to such a set."""
    if value is None:
        return ""

    def kinds_problem(names: Any, where: str) -> str:
        if isinstance(names, str):
            names = {names}
        if not isinstance(names, Iterable):
            return f"{name}{where} must be a set of variant kinds"
        unknown = sorted({str(item) for item in names} - set(PROBE_KINDS) - {"*"})
        if unknown:
            return (
                f"{name}{where} names unknown variant kind(s) {', '.join(unknown)}; "
                f"known: {', '.join(PROBE_KINDS)} (or * for all)"
            )
        return ""

    if isinstance(value, Mapping):
        for key, names in value.items():
            problem = kinds_problem(names, f"[{key!r}]")
            if problem:
                return problem
        return ""
    return kinds_problem(value, "")


def check_probes_skip(name: str, value: Any) -> Any:
    problem = probes_skip_problem(name, value)
    if problem:
        raise ValueKind.Problem(problem)
    return value


@dataclass(frozen=True)
class ProbeOptions:
    """The per-check options of the deployment probes."""

    probes: str = per_check(
        "report",
        "After a passing check, call the raw engine with variants of the example (other "
        "layouts, sizes, dtypes, scalar values, aliased inputs, edge values) and compare with "
        "eager: off, "
        "report (list hazards in the summary) or fail (a silently wrong variant fails the "
        "check). Default: report.",
        kind=PROBE_POLICIES,
        marker=True,
        keyword=True,
    )
    serving_checks: bool = per_check(
        False,
        "The serving process sets AOTI_RUNTIME_CHECK_INPUTS=1: probe variants the engine then "
        "refuses are neither hazards nor failures. Default: off.",
        parse=ValueKind.SWITCH.parse,
        flag=True,
    )
    probes_skip: Any = per_check(
        None,
        "Probe variants a model does not support: a set of variant kinds for every input "
        '({"channels_last"}) or per input ({"x": {"size"}}); "*" for all kinds.',
        check=check_probes_skip,
        marker=True,
        keyword=True,
    )


@dataclass(frozen=True)
class ProbeSettings:
    """The session option of the deployment probes: how the summary lists hazards."""

    hazards: str = session_field(
        Option(
            "aoti-hazards",
            HAZARD_VIEWS.parse,
            "summary",
            "Deployment hazards in the summary: summary (grouped by remedy, a warm run's "
            "unchanged ones in one line) or all (every variant; also with -v). "
            "Default: summary.",
        )
    )


def probe_properties(fields: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The JUnit properties of a check's probes: how many variants, how many wrong and
    how many unguarded; none where no probe ran."""
    outcomes = [probe.get("outcome") for probe in fields.get("probes") or ()]
    if not outcomes:
        return []
    return [
        ("aoti_probes", len(outcomes)),
        ("aoti_probes_wrong", outcomes.count("wrong")),
        ("aoti_probes_unguarded", outcomes.count("unguarded")),
    ]


def _probe_target(finding: Mapping[str, Any]) -> Mapping[str, Any]:
    """A probe's failure reproduces as a difference of any output on the variant input the
    bundle holds."""
    return {"kind": "output", "location": ""}


PROBE_KIND = FindingKind("probe")
"""The kind of this feature's failures (its ``Feature``'s ``kinds`` say what it means)."""


PROBES = Feature(
    "probes",
    "Deployment probes: the raw engine called with variants of the example, as deployed "
    "callers will call it, and the hazards they find",
    options=ProbeOptions,
    settings=ProbeSettings,
    record_fields={"probes": [], "probes_cached": False},
    properties=probe_properties,
    kinds={PROBE_KIND: "the engine silently differs on an input the program accepts"},
    bundle=BundleAdapter(_probe_target),
)
