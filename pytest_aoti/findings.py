"""What a failed check found, as data (:class:`Finding`), and the one renderer that turns it
into text: the failure text, the JSON report and the repro bundle read the same fields."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Protocol

from pytest_aoti.frames import quoted_frames


class FindingKind(str):
    """What a check found wrong: the ``kind`` of every :class:`Finding`. A str, so that
    ``finding.kind == "buffer"`` holds, JSON writes ``"buffer"`` and f-strings print it.

    The core's own kinds are the class's attributes (:data:`CORE_KINDS` says what each
    means); a feature declares its own with its :class:`~pytest_aoti.api.Feature`'s
    ``kinds`` and makes them with ``FindingKind("name")``."""

    __slots__ = ()

    @property
    def value(self) -> str:
        """The kind's name, a plain str (as an enum member's ``value``)."""
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"FindingKind({self.value!r})"

    @property
    def is_parity(self) -> bool:
        """A difference between eager and the engine on one input set (an output, an input,
        an expected value): what stage attribution replays."""
        return self in PARITY_KINDS

    @property
    def reproducible(self) -> bool:
        """Whether a repro bundle's script reproduces a finding of this kind (a feature's own
        kind through its bundle adapter)."""
        return self in REPRODUCIBLE_KINDS

    OUTPUT: ClassVar[FindingKind]
    MUTATED_INPUT: ClassVar[FindingKind]
    UNTOUCHED_INPUT: ClassVar[FindingKind]
    IN_PLACE: ClassVar[FindingKind]
    EXPECTED_VALUE: ClassVar[FindingKind]
    EXPECTATION: ClassVar[FindingKind]
    BUFFER: ClassVar[FindingKind]
    SIGNATURE: ClassVar[FindingKind]
    ALIASING: ClassVar[FindingKind]
    RANDOM: ClassVar[FindingKind]
    EAGER: ClassVar[FindingKind]
    CRASH: ClassVar[FindingKind]
    ATTRIBUTE: ClassVar[FindingKind]
    CHECK: ClassVar[FindingKind]
    EXPORT: ClassVar[FindingKind]
    DECOMPOSE: ClassVar[FindingKind]
    COMPILE: ClassVar[FindingKind]


CORE_KINDS: dict[FindingKind, str] = {}
"""The core's kinds, each with what it means (a feature's are in its ``Feature.kinds``)."""


for _attribute, _name, _meaning in (
    ("OUTPUT", "output", "an output differs between eager and the engine"),
    ("MUTATED_INPUT", "mutated input", "a mutated input ends with another value than eager's"),
    ("UNTOUCHED_INPUT", "untouched input", "the engine wrote to an input the program keeps"),
    ("IN_PLACE", "in-place", "the engine moved a mutated input's storage instead of writing it"),
    ("EXPECTED_VALUE", "expected value", "the engine's input differs from the test's value"),
    ("EXPECTATION", "expectation", "the test's expected value is wrong: eager misses it too"),
    ("BUFFER", "buffer", "a buffer's state differs or is not recorded by the program"),
    ("SIGNATURE", "signature", "the mutation maps differ from what the test declared"),
    ("ALIASING", "aliasing", "aliased example inputs specialized the program"),
    ("RANDOM", "random", "the program draws random numbers: eager and engine cannot agree"),
    ("EAGER", "eager", "eager PyTorch itself fails on the example"),
    ("CRASH", "crash", "the engine crashed or hung the crash screen's child process"),
    ("ATTRIBUTE", "python attribute", "forward changes a Python attribute export froze"),
    ("CHECK", "check", "a plain message (AotiCheckError raised with a string)"),
    ("EXPORT", "export", "torch.export.export refused the module"),
    ("DECOMPOSE", "decompose", "run_decompositions failed on the exported program"),
    ("COMPILE", "compile", "aoti_compile_and_package or aoti_load_package failed"),
):
    _kind = FindingKind(_name)
    setattr(FindingKind, _attribute, _kind)
    CORE_KINDS[_kind] = _meaning


PARITY_KINDS = frozenset(
    {
        FindingKind.OUTPUT,
        FindingKind.MUTATED_INPUT,
        FindingKind.UNTOUCHED_INPUT,
        FindingKind.EXPECTED_VALUE,
    }
)
"""Differences between eager and the engine on one input set: what stage attribution replays."""

REPRODUCIBLE_KINDS = frozenset(
    {
        FindingKind.OUTPUT,
        FindingKind.MUTATED_INPUT,
        FindingKind.UNTOUCHED_INPUT,
        FindingKind.BUFFER,
        FindingKind.CRASH,
    }
)
"""Finding kinds a repro bundle's ``repro.py`` reproduces: a difference from eager's saved
results, or an engine killed by a signal (``repro.py`` exits 128+N for signal N)."""


@dataclass(frozen=True)
class BundleAdapter:
    """How a repro bundle reproduces a finding of a feature's own kinds (its ``Feature``'s
    ``bundle``): ``target`` gives the finding ``repro.py`` must see again, as JSON of the
    core's kinds (the difference found on a generated shape, say), or None where there is
    none to reproduce (the failure then gets no bundle); ``files`` writes the feature's own
    files into the bundle's folder."""

    target: Callable[[Mapping[str, Any]], Mapping[str, Any] | None]
    files: Callable[[Mapping[str, Any], Path], None] | None = None


STAGES = {
    "eager": "eager PyTorch fails on the example",
    "export": "torch.export broke it",
    "decompose": "run_decompositions broke it",
    "compile": "the AOTI compile broke it",
}
"""Where a difference was introduced, in words for the report's first line."""

_STAGE_DETAIL = {
    "eager": "the module fails in eager PyTorch, before any export or compile",
    "export": "the exported program (exported.module(), no compile) already differs from eager",
    "decompose": "the exported program matches eager, the decomposed one (run_decompositions) "
    "does not",
    "compile": "the exported and the decomposed programs match eager; only the AOTI engine differs",
}


class NodeReport(Protocol):
    """The first diverging graph node (see :mod:`pytest_aoti.triage.localize`)."""

    def describe(self) -> list[str]: ...

    def to_json(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Figures:
    """How far two tensors are apart."""

    shape: tuple[int, ...]
    dtype: str
    device: str
    numel: int
    mismatched: int  # beyond the tolerance (or unequal, for exact comparisons)
    max_abs: float
    max_rel: float
    mean_abs: float
    worst_index: tuple[int, ...]
    expected_value: str
    actual_value: str
    nan_expected: int = 0
    nan_actual: int = 0
    inf_expected: int = 0
    inf_actual: int = 0
    rtol_needed: float | None = None  # the smallest passing rtol, same atol (inf: none)
    atol_needed: float | None = None  # the smallest passing atol, same rtol

    @property
    def fraction(self) -> float:
        return self.mismatched / self.numel if self.numel else 0.0

    def lines(self, expected_name: str, actual_name: str = "engine") -> list[str]:
        share = 100.0 * self.fraction
        lines = [
            f"shape {self.shape}, dtype {self.dtype}, device {self.device}",
            f"mismatched {self.mismatched} of {self.numel} ({share:.3g}%)",
            f"max abs error {self.max_abs:.3g}, max rel error {self.max_rel:.3g}, "
            f"mean abs error {self.mean_abs:.3g}",
            f"worst at index {self.worst_index}: {expected_name}={self.expected_value} "
            f"{actual_name}={self.actual_value}",
        ]
        specials = (self.nan_expected, self.nan_actual, self.inf_expected, self.inf_actual)
        if any(specials):
            lines.append(
                f"NaN: {expected_name} {self.nan_expected}, {actual_name} {self.nan_actual}; "
                f"Inf: {expected_name} {self.inf_expected}, {actual_name} {self.inf_actual}"
            )
        if self.rtol_needed is not None and self.atol_needed is not None:
            lines.append(
                f"would pass with rtol={_tol(self.rtol_needed)} (same atol) "
                f"or atol={_tol(self.atol_needed)} (same rtol)"
            )
        return lines

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["shape"] = list(self.shape)
        data["worst_index"] = list(self.worst_index)
        data["fraction"] = self.fraction
        return {key: _json_number(value) for key, value in data.items()}


@dataclass(frozen=True)
class Finding:
    """One thing a check found wrong, with everything needed to report it."""

    quoted_frames = staticmethod(quoted_frames)

    kind: FindingKind
    """What was found (a plain string is taken as the :class:`FindingKind` it names): one
    of :data:`CORE_KINDS` or of a feature's ``kinds``."""
    location: str
    """What was compared: ``output[0]``, ``input 'x'``, ``buffer 'counter'``."""
    summary: str
    """The end of the first line: what differed, in one phrase."""
    phrase: str = "differs between eager and the AOTI engine"
    attribute: str = ""
    """``shape``, ``dtype``, ... when the leaves differ in that rather than in values."""
    expected_name: str = "eager"
    """What the engine was compared with: ``eager``, or ``expected`` for the test's values."""
    actual_name: str = "engine"
    """What was compared: the ``engine``, or ``eager`` when eager missed an expectation."""
    lead: str = ""
    """A cause put before the first line, e.g. ``buffer state diverges ('counter')``."""
    context: str = ""
    """Where in the check: ``call 2 of 3, sample 1``."""
    call: int | None = None
    calls: int | None = None
    sample: str = ""
    """Which input set: ``sample 1``, ``generated x=(3, 8)``; empty for the first."""
    tolerance: dict[str, Any] | None = None
    """``{"rtol", "atol", "source", "explicit"}`` of value comparisons (explicit: the test's)."""
    figures: Figures | None = None
    details: tuple[str, ...] = ()
    """Further lines under the first one, before the figures."""
    notes: tuple[str, ...] = ()
    """Lines after the figures: explanations, what to try."""
    stage: str | None = None
    """Where the difference was introduced: ``eager``, ``export``, ``decompose``, ``compile``."""
    stage_reason: str = ""
    """Why no stage could be given, when attribution was tried and failed."""
    node: NodeReport | None = None
    node_reason: str = ""
    """Why no node is named, when localization was tried."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Kind-specific data for the JSON report (buffer names, aliased inputs, shapes)."""
    message: str = ""
    """A first line written whole by the caller, in place of location, phrase and summary."""
    footer: tuple[str, ...] = ()
    """Last lines: where the repro bundle was written."""
    tolerance_note: str = ""
    """Said next to the stage when only the test's tighter tolerance failed."""
    record_fields: Mapping[str, Any] = field(default_factory=dict)
    """Fields the failing check still adds to its JSON record (not the finding's JSON)."""
    check: str | None = None
    """The failed check, where another plugin added it; None for the built-in checks."""

    @classmethod
    def plain(
        cls, kind: FindingKind | str, message: str, location: str = "", **fields: Any
    ) -> Finding:
        """A finding whose text is a written message: its first line, then detail lines."""
        first, *rest = message.splitlines() or [""]
        return cls(
            kind=FindingKind(kind),
            location=location,
            summary="",
            message=first,
            details=tuple(line.strip() for line in rest),
            **fields,
        )

    def __post_init__(self) -> None:
        # a kind given as its string (``"buffer"``) is taken as the kind it names
        object.__setattr__(self, "kind", FindingKind(self.kind))

    def with_call(self, call: int, calls: int, sample: str, context: str) -> Finding:
        return replace(self, call=call, calls=calls, sample=sample, context=context)

    def headline(self, *, stage: bool = True) -> str:
        """The first line; ``stage`` False leaves out the stage in words."""
        ctx = f" ({self.context})" if self.context else ""
        if self.message:
            line = self.message
        elif self.expected_name == "eager":
            subject = f"{self.location} {self.attribute}".rstrip()
            line = f"{subject} {self.phrase}{ctx}: {self.summary}"
        else:
            lead = f"{self.attribute} differs: " if self.attribute else ""
            line = f"{self.location} {self.phrase}{ctx}: {lead}{self.summary}"
        if self.lead:
            line = f"{self.lead}: {line}"
        if stage and self.stage in STAGES:
            note = f" ({self.tolerance_note})" if self.tolerance_note else ""
            line = f"{STAGES[self.stage]}{note}: {line}"
        return line

    def render(self) -> str:
        """The text of the failure, first line first."""
        lines = [self.headline()]
        body = list(self.details)
        if self.figures is not None:
            body += self.figures.lines(self.expected_name, self.actual_name)
        if self.tolerance is not None and self.figures is not None:
            body.append(
                f"tolerance rtol={self.tolerance['rtol']:g}, atol={self.tolerance['atol']:g} "
                f"({self.tolerance['source']})"
            )
        body += self.notes
        note = f"; {self.tolerance_note}" if self.tolerance_note else ""
        if self.stage in _STAGE_DETAIL:
            body.append(f"stage: {self.stage}: {_STAGE_DETAIL[self.stage]}{note}")
        elif self.stage_reason:
            body.append(f"stage: not attributed ({self.stage_reason}){note}")
        elif self.tolerance_note:
            body.append(self.tolerance_note)
        if self.node is not None:
            body += self.node.describe()
            if self.node_reason:  # a caveat, e.g. named from a sample of the graph's nodes
                body.append(f"node: {self.node_reason}")
        elif self.node_reason:
            body.append(f"node: not named ({self.node_reason})")
        body += self.footer
        lines += [f"  {line}" for line in body]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "location": self.location,
            "message": self.headline(),
            "call": self.call,
            "calls": self.calls,
            "sample": self.sample or None,
            "tolerance": self.tolerance,
            "figures": None if self.figures is None else self.figures.to_json(),
            "stage": self.stage,
            "stage_reason": self.stage_reason or None,
            **({"tolerance_note": self.tolerance_note} if self.tolerance_note else {}),
            "node": None if self.node is None else self.node.to_json(),
            "details": list(self.details) + list(self.notes),
            **({"extra": self.extra} if self.extra else {}),
            **({"check": self.check} if self.check else {}),
        }


def layouts_lead(failed: Sequence[str], passed: Sequence[str]) -> str:
    """What a failure of a check run in several layouts says first: where it failed and where
    it passed (``""`` is the example's own layout)."""

    def named(layouts: Sequence[str]) -> str:
        others = [layout for layout in layouts if layout]
        parts = ["the example's own layout"] if "" in layouts else []
        if others:
            parts.append(f"layout{'s' if len(others) > 1 else ''} {', '.join(others)}")
        return " and in ".join(parts)

    line = f"fails in {named(failed)}"
    return f"{line} (passes in {named(passed)})" if passed else line


def _tol(value: float) -> str:
    return "none" if math.isinf(value) else f"{value:.3g}"


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
