"""The "deployment hazards" section of the terminal summary, grouped by remedy.

By default (``--aoti-hazards=summary``) one short paragraph says what
``AOTI_RUNTIME_CHECK_INPUTS=1`` in the serving process would refuse (how many programs,
variants by kind, the remedy once): on real models that is nearly every hazard, and one
setting removes it. Then, per program (named by its test id), only the hazards that stay
silent even with input checks (aliasing, a scalar the engine does not refuse, any variant
whose checked run is unknown), each with its figures and remedy; then the edge values the
engines get wrong ("values outside the example's range"), a group of their own: no input
check refuses a value, so their remedy is another. With serving checks
declared (``--aoti-serving-checks``) the refused ones are no hazards: the paragraph says
so in a line. A warm run's programs whose outcomes came from the cache and did not change
since a run last showed them are one line (see :mod:`pytest_aoti.probes.last_hazards`).
``--aoti-hazards=all`` (or ``-v``) lists every variant of every probed program.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_aoti.api import CheckRecord
from pytest_aoti.probes.feature import PROBE_LAYOUT_KINDS, ProbeVariant
from pytest_aoti.probes.last_hazards import keep, outcomes_digest, read_last
from pytest_aoti.probes.outcomes import hazard_group

if TYPE_CHECKING:
    import pytest

_KIND_WORDS: dict[str, str] = {
    **{kind: "layouts" for kind in PROBE_LAYOUT_KINDS},
    ProbeVariant.SIZE: "sizes",
    ProbeVariant.DTYPE: "dtypes",
    ProbeVariant.DEVICE: "devices",
    ProbeVariant.SCALAR: "scalars",
    ProbeVariant.ALIASED: "aliasing",
}
_WORD_ORDER = ("layouts", "sizes", "dtypes", "devices", "scalars", "aliasing", "other")

CHECKS_REMEDY = (
    "  remedy: set AOTI_RUNTIME_CHECK_INPUTS=1 in the serving process (then declare it: "
    "--aoti-serving-checks), or call the engine with inputs as exported (contiguous, the "
    "exported sizes, dtypes and devices)"
)

EDGE_REMEDY = (
    "  remedy: AOTI_RUNTIME_CHECK_INPUTS=1 refuses no values: where callers may pass such "
    "values, check the input at the call site (torch.isfinite, a clamp to the range "
    'served), or report the engine\'s result to PyTorch; values="edge" fails the check '
    "on them"
)


@dataclass(frozen=True)
class Probed:
    """One probed program on one device: its first test's record and whether every test
    that used it got the outcomes from the cache."""

    record: CheckRecord
    probes: list[dict[str, Any]]
    cached: bool

    @property
    def slot(self) -> str:
        return f"{self.record.program}@{self.record.device}"

    def digest(self, serving_checks: bool = False) -> str:
        """What the section shows of it: its outcomes, and whether serving checks were
        declared (which changes what is a hazard)."""
        return outcomes_digest(self.probes) + (":serving" if serving_checks else "")

    def grouped(self, group: str) -> list[dict[str, Any]]:
        return [probe for probe in self.probes if group_of(probe) == group]

    @property
    def hazardous(self) -> bool:
        return any(group_of(probe) != "none" for probe in self.probes)


def group_of(probe: Mapping[str, Any]) -> str:
    """A probe's group (``none``, ``input_checks``, ``silent``, ``values``), from its
    outcome and kind."""
    checks = probe.get("refused_with_checks")
    refused = None if checks is None else bool(checks)
    return hazard_group(str(probe.get("outcome")), refused, str(probe.get("kind") or ""))


def programs_probed(records: Sequence[CheckRecord]) -> list[Probed]:
    """One entry per probed program and device (named by the first test that probed it)."""
    first: dict[tuple[str, str], CheckRecord] = {}
    cached: dict[tuple[str, str], bool] = {}
    for record in records:
        probes = record.other_fields.get("probes")
        if not probes:
            continue
        slot = (record.program, record.device)
        first.setdefault(slot, record)
        cached[slot] = cached.get(slot, True) and bool(record.other_fields.get("probes_cached"))
    return [
        Probed(record, record.other_fields["probes"], cached[slot])
        for slot, record in first.items()
    ]


def hazard_lines(
    records: Sequence[CheckRecord],
    *,
    view: str = "summary",
    serving_checks: bool = False,
    last: Mapping[str, str] | None = None,
) -> list[str]:
    """The section's lines; empty when no probe found a hazard. ``last``: the digests of
    what the last runs showed, by slot (:func:`~pytest_aoti.probes.last_hazards.read_last`)."""
    probed = [item for item in programs_probed(records) if item.hazardous]
    if not probed:
        return []
    if view == "all":
        return _every_variant(programs_probed(records))
    last = last or {}
    kept = [
        item
        for item in probed
        if item.cached and last.get(item.slot) == item.digest(serving_checks)
    ]
    shown = [item for item in probed if item not in kept]
    lines = _refused_paragraph(shown, serving_checks)
    for item in shown:
        silent = item.grouped("silent")
        if silent:
            lines.append(f"{item.record.label}: {len(silent)} hazard(s) input checks do not catch")
            lines += _variant_lines(silent)
    lines += _edge_paragraph(shown)
    if kept:
        lines.append(f"{len(kept)} program(s) keep the hazards of the last run: -v lists them")
    elif lines:
        lines.append("-v or --aoti-hazards=all lists every variant")
    return lines


def _refused_paragraph(shown: Sequence[Probed], serving_checks: bool) -> list[str]:
    refused = [(item, probe) for item in shown for probe in item.grouped("input_checks")]
    if not refused:
        return []
    words = Counter(_KIND_WORDS.get(str(probe.get("kind")), "other") for _, probe in refused)
    by_kind = ", ".join(f"{word} {words[word]}" for word in _WORD_ORDER if words[word])
    programs = len({item.slot for item, _ in refused})
    if serving_checks:
        return [
            f"AOTI_RUNTIME_CHECK_INPUTS=1, declared set by the serving process, refuses "
            f"{len(refused)} variant(s) of {programs} program(s) ({by_kind}): not hazards"
        ]
    return [
        f"AOTI_RUNTIME_CHECK_INPUTS=1 refuses {len(refused)} variant(s) of {programs} "
        f"program(s) that their engines run without it, with other results than eager: "
        f"{by_kind}",
        CHECKS_REMEDY,
    ]


def _edge_paragraph(shown: Sequence[Probed]) -> list[str]:
    """The edge values the engines get wrong, per program, and their one remedy."""
    edge = [(item, probes) for item in shown if (probes := item.grouped("values"))]
    if not edge:
        return []
    count = sum(len(probes) for _, probes in edge)
    lines = [
        f"values outside the example's range: the engine differs from eager on {count} "
        f"edge-value input set(s) of {len(edge)} program(s)"
    ]
    for item, probes in edge:
        lines.append(f"{item.record.label}:")
        lines += [_probe_line(probe, checks=False) for probe in probes]
    lines.append(EDGE_REMEDY)
    return lines


def _variant_lines(probes: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each variant with its figures; each remedy once, after the variants it applies to."""
    by_remedy: dict[str, list[Mapping[str, Any]]] = {}
    for probe in probes:
        by_remedy.setdefault(str(probe.get("remedy") or ""), []).append(probe)
    lines = []
    for remedy, items in by_remedy.items():
        lines += [_probe_line(probe) for probe in items]
        if remedy:
            lines.append(f"    remedy: {remedy}")
    return lines


def _every_variant(probed: Sequence[Probed]) -> list[str]:
    """Every variant of every program; each remedy once, under the first variant it
    applies to (ten programs of one kind share one remedy sentence)."""
    lines = []
    said: set[str] = set()
    for item in probed:
        lines.append(f"{item.record.label} (program {item.record.program[:12]}):")
        hazards = [probe for probe in item.probes if group_of(probe) != "none"]
        for probe in hazards:
            remedy = str(probe.get("remedy") or "")
            line = _probe_line(probe)
            lines.append(f"{line} (remedy above)" if remedy in said else line)
            if remedy and remedy not in said:
                said.add(remedy)
                lines.append(f"    remedy: {remedy}")
        fine = [
            f"{probe.get('input')} {probe.get('variant')} {probe.get('outcome')}"
            for probe in item.probes
            if group_of(probe) == "none"
        ]
        if fine:
            lines.append(f"  not hazards: {', '.join(fine)}")
    return lines


def write_hazards(
    terminal: pytest.TerminalReporter,
    records: Sequence[CheckRecord],
    *,
    view: str = "summary",
    serving_checks: bool = False,
    memory: Path | None = None,
) -> None:
    """Write the section, titled, when there is something to say; remember what the
    probed programs' outcomes were in ``memory`` (the plugin's cache directory)."""
    probed = programs_probed(records)
    lines = hazard_lines(records, view=view, serving_checks=serving_checks, last=read_last(memory))
    keep(memory, {item.slot: item.digest(serving_checks) for item in probed})
    if not lines:
        return
    terminal.write_sep("-", "aoti: deployment hazards")
    for line in lines:
        terminal.write_line(line)


def _probe_line(probe: Mapping[str, Any], *, checks: bool = True) -> str:
    """``  wrong: input 'x' permuted: max abs error 1.8...``: one variant and its figures."""
    return (
        f"  {probe.get('outcome')}: input '{probe.get('input')}' {probe.get('variant')}: "
        f"{_figures(probe, checks=checks)}"
    )


def _figures(probe: Mapping[str, Any], *, checks: bool = True) -> str:
    """Its errors; with ``checks``, what the engine does with input checks on."""
    max_abs, max_rel = probe.get("max_abs"), probe.get("max_rel")
    if max_abs is None:
        text = str(probe.get("detail") or "no figures")
    else:
        text = f"max abs error {float(max_abs):.3g}"
        if max_rel is not None:
            text += f", max rel error {float(max_rel):.3g}"
    if not checks:
        return text
    refused = probe.get("refused_with_checks")
    if refused is None:
        text += "; unknown whether AOTI_RUNTIME_CHECK_INPUTS=1 refuses it"
    else:
        text += "; refused with" if refused else "; also runs with"
        text += " AOTI_RUNTIME_CHECK_INPUTS=1"
    return text
