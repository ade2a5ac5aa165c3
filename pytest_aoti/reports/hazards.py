"""The "deployment hazards" section of the terminal summary, from the checks' probe records.

Per program, each ``wrong`` variant (the exported program accepts it, the engine silently
returns something else) with its figures and remedy; the ``unguarded`` ones (the exported
program refuses them, the engine runs them anyway) are common to every engine without input
checks, so they are summed up in a line or two for the whole run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from pytest_aoti.reports.records import CheckRecord


class _Terminal(Protocol):
    def write_sep(self, sep: str, title: str) -> Any: ...

    def write_line(self, line: str) -> Any: ...


def programs_probed(
    records: Sequence[CheckRecord],
) -> list[tuple[CheckRecord, list[dict[str, Any]]]]:
    """One record per probed program and device (the first test that probed it)."""
    seen: set[tuple[str, str]] = set()
    found = []
    for record in records:
        slot = (record.program, record.device)
        if record.probes and slot not in seen:
            seen.add(slot)
            found.append((record, record.probes))
    return found


def hazard_lines(records: Sequence[CheckRecord]) -> list[str]:
    """The section's lines; empty when no probe found a hazard."""
    lines: list[str] = []
    unguarded: list[Mapping[str, Any]] = []
    programs_unguarded = 0
    for record, probes in programs_probed(records):
        wrong = [probe for probe in probes if probe.get("outcome") == "wrong"]
        loose = [probe for probe in probes if probe.get("outcome") == "unguarded"]
        unguarded += loose
        programs_unguarded += bool(loose)
        if not wrong:
            continue
        lines.append(f"program {record.program[:12]} ({record.device}), {record.test}:")
        for probe in wrong:
            lines.append(f"  wrong: input '{probe['input']}' {probe['variant']}: {_figures(probe)}")
            if probe.get("remedy"):
                lines.append(f"    remedy: {probe['remedy']}")
    if unguarded:
        kinds = Counter(str(probe.get("kind") or "other") for probe in unguarded)
        refused = sum(1 for probe in unguarded if probe.get("refused_with_checks"))
        by_kind = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items()))
        lines.append(
            f"unguarded: {len(unguarded)} variant(s) in {programs_unguarded} program(s) "
            f"({by_kind}) that the exported program refuses run on the engine without an "
            "error, with other results than eager"
        )
        lines.append(
            f"  AOTI_RUNTIME_CHECK_INPUTS=1 in the serving process refuses {refused} of them; "
            "the JSON report (--aoti-report) lists each"
        )
    return lines


def write_hazards(terminal: _Terminal, records: Sequence[CheckRecord]) -> None:
    """Write the section, titled, when there is something to say."""
    lines = hazard_lines(records)
    if not lines:
        return
    terminal.write_sep("-", "aoti: deployment hazards")
    for line in lines:
        terminal.write_line(line)


def _figures(probe: Mapping[str, Any]) -> str:
    max_abs, max_rel = probe.get("max_abs"), probe.get("max_rel")
    if max_abs is None:
        text = str(probe.get("detail") or "no figures")
    else:
        text = f"max abs error {float(max_abs):.3g}"
        if max_rel is not None:
            text += f", max rel error {float(max_rel):.3g}"
    checks = probe.get("refused_with_checks")
    if checks is not None:
        text += "; refused with" if checks else "; also runs with"
        text += " AOTI_RUNTIME_CHECK_INPUTS=1"
    return text
