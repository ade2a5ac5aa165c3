"""What a deployment probe found: each variant's outcome, its group in the hazards summary,
whether a check fails on it, and its remedy.

An outcome is one of :data:`OUTCOMES`; ``wrong`` and ``unguarded`` are hazards. Edge values
(kind ``values``) are hazards of their own group, since no input check refuses a value, and
fail a check only with ``values="edge"``; every other kind fails one with ``probes="fail"``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from pytest_aoti.probes.feature import ProbeVariant

OUTCOMES = ("ok", "refused", "wrong", "unguarded")
HAZARDS = ("wrong", "unguarded")
EDGE_KIND = ProbeVariant.VALUES
"""The variant kind of edge values."""
GROUPS = ("none", "input_checks", "silent", "values")
"""What a variant's outcome asks of a user: ``none`` (the engine is right or refuses it),
``input_checks`` (a hazard ``AOTI_RUNTIME_CHECK_INPUTS=1`` in the serving process removes:
the checked engine refuses it), ``silent`` (a hazard that stays with input checks, or one
whose checked run gave no answer), ``values`` (edge values the engine gets wrong: values
outside the example's range, which no input check refuses)."""


def hazard_group(outcome: str, refused_with_checks: bool | None, kind: str = "") -> str:
    """The :data:`GROUPS` entry of a variant's outcome."""
    if outcome not in HAZARDS:
        return "none"
    if kind == EDGE_KIND:
        return "values"
    return "input_checks" if refused_with_checks is True else "silent"


def fails(
    outcome: str,
    refused_with_checks: bool | None,
    serving_checks: bool,
    *,
    kind: str = "",
    probes: str = "fail",
    edge: str = "report",
) -> bool:
    """Whether the check fails on a variant: a ``wrong`` one (the exported program accepts
    it), under ``probes="fail"`` (edge values: under ``edge="fail"``), unless the serving
    process is declared to set ``AOTI_RUNTIME_CHECK_INPUTS=1`` and the checked engine
    refuses it. ``unguarded`` ones (the exported program refuses them, a new scalar value
    among them) never fail."""
    policy_fails = edge == "fail" if kind == EDGE_KIND else probes == "fail"
    if outcome != "wrong" or not policy_fails:
        return False
    return not (serving_checks and refused_with_checks is True)


@dataclass(frozen=True)
class ProbeOutcome:
    """How the raw engine handled one variant of the example."""

    input: str
    """The user input varied (``"x"``; ``"x, y"`` for aliasing)."""
    variant: str
    """``channels_last``, ``size[0]=7``, ``value=3.5``, ``same tensor`` ..."""
    outcome: str
    """One of :data:`OUTCOMES`."""
    kind: str = ""
    """One of :data:`~pytest_aoti.probes.feature.PROBE_KINDS` (a :class:`~pytest_aoti.probes.feature.ProbeVariant`)."""
    max_abs: float | None = None
    max_rel: float | None = None
    refused_with_checks: bool | None = None
    """Whether the engine refuses the variant with ``AOTI_RUNTIME_CHECK_INPUTS=1``."""
    remedy: str = ""
    detail: str = ""
    """The engine's error, a shape mismatch, a crash: what the figures do not say."""

    @property
    def group(self) -> str:
        """Its :data:`GROUPS` entry."""
        return hazard_group(self.outcome, self.refused_with_checks, self.kind)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["kind"] = str(self.kind)  # plain text: xdist's channel carries builtin types only
        for name in ("max_abs", "max_rel"):  # JSON holds no inf or NaN
            value = data[name]
            if isinstance(value, float) and not math.isfinite(value):
                data[name] = str(value)
        data["group"] = self.group
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProbeOutcome:
        names = set(cls.__dataclass_fields__)
        values = {key: value for key, value in data.items() if key in names}
        for name in ("max_abs", "max_rel"):
            if isinstance(values.get(name), str):
                values[name] = float(values[name])
        return cls(**values)

    def figures(self) -> str:
        """``max abs error 5.37, max rel error 2.1`` or what stands in for figures."""
        if self.max_abs is None:
            return self.detail or "no figures"
        rel = "" if self.max_rel is None else f", max rel error {self.max_rel:.3g}"
        return f"max abs error {self.max_abs:.3g}{rel}"


@dataclass(frozen=True)
class ProbeReport:
    """The probes of one program."""

    outcomes: tuple[ProbeOutcome, ...]
    cached: bool = False
    """True when the outcomes came from the cache: no engine was called."""
    seconds: float = 0.0
    skipped: tuple[str, ...] = ()
    """Variants eager itself rejects: not probed."""
    error: str = ""
    """Why the probes could not run (a passed check never fails for it)."""
    ran: int = 0
    """Variants this run probed (the others' outcomes were kept from earlier runs)."""

    @property
    def wrong(self) -> list[ProbeOutcome]:
        return [outcome for outcome in self.outcomes if outcome.outcome == "wrong"]

    @property
    def unguarded(self) -> list[ProbeOutcome]:
        return [outcome for outcome in self.outcomes if outcome.outcome == "unguarded"]

    def failing(
        self, serving_checks: bool = False, *, probes: str = "fail", edge: str = "report"
    ) -> list[ProbeOutcome]:
        """The variants the check fails on under these policies (see :func:`fails`)."""
        return [
            item
            for item in self.outcomes
            if fails(
                item.outcome,
                item.refused_with_checks,
                serving_checks,
                kind=item.kind,
                probes=probes,
                edge=edge,
            )
        ]

    def to_json(self) -> list[dict[str, Any]]:
        return [outcome.to_json() for outcome in self.outcomes]


_CALL_SITE = {
    "channels_last": "call it with {input}.contiguous(), or export with a channels_last "
    "example if callers pass that layout",
    "channels_last_3d": "call it with {input}.contiguous(), or export with a "
    "channels_last_3d example if callers pass that layout",
    "permuted": "call it with {input}.contiguous()",
    "strided_slice": "call it with {input}.contiguous() (a view of a larger tensor is not)",
    "storage_offset": "call it with {input}.clone() (a tensor at a storage offset)",
    "size": "export that dim as dynamic (torch.export.Dim) if callers pass other sizes",
    "dtype": "cast {input} to the exported dtype at the call site",
    "device": "move {input} to the engine's device at the call site",
    "scalar": "pass {input} as a tensor (torch.tensor(value)) so the program reads it when "
    "called, not when exported",
    "aliased": "pass distinct tensors (e.g. a .clone() of one of {input}); the engine's "
    "input checks do not see aliasing",
    EDGE_KIND: "AOTI_RUNTIME_CHECK_INPUTS=1 refuses no values: where callers may pass such "
    "values, check {input} at the call site (torch.isfinite, a clamp to the range served), "
    'or report the engine\'s result to PyTorch with the repro bundle (values="edge" fails '
    "the check on it)",
}


def with_remedy(outcome: ProbeOutcome) -> ProbeOutcome:
    """The outcome with its remedy: input checks where they refuse it, and what the caller
    can do at the call site for its kind."""
    parts = []
    if outcome.refused_with_checks:
        parts.append(
            "set AOTI_RUNTIME_CHECK_INPUTS=1 in the serving process (the engine then "
            "refuses this input)"
        )
    template = _CALL_SITE.get(outcome.kind)
    if template:
        parts.append(template.format(input=outcome.input))
    return replace(outcome, remedy="; or ".join(parts))
