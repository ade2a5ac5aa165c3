"""What the weights check found, in words: each weight the engine cannot take, what a server
that swaps weights sees, the remedy where one was measured; the failure's text (under
``weights="swap"``) and the summary's section of deployment hazards (under ``"report"``).
Pure text from the record's ``weights`` field: no torch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

FOLDED = "folded"
"""Not among the engine's constants (``get_constant_fqns()``): folded into the compiled code."""
REFUSED = "refused"
"""Among the engine's constants, but ``load_constants`` raises on a new value."""
IGNORED = "ignored"
"""Accepted by ``load_constants``, and the engine keeps answering with the compiled value."""
DIFFERS = "differs"
"""Accepted, and the engine's answer moves with it but not to eager's (``together``: the
whole set differs and no single weight's swap alone does)."""
UNSUPPLIED = "unsupplied"
"""An engine constant that is no weight of the module: a full update cannot name it."""

RUNTIME_FOLDING = "aot_inductor.use_runtime_constant_folding"
FOLDING_REMEDY = (
    f'remedy: compile with inductor_configs={{"{RUNTIME_FOLDING}": True}}: the engine then '
    "lists every weight (and the constants it folds from them, folded again after a swap) "
    "and answers as eager does after a swap (measured on torch 2.13.0 and 2.15.0)"
)
OTHER_REMEDY = (
    "remedy: none measured: recompile the package for each weight set, or report it to "
    "PyTorch with the weight's name"
)
MODES = (
    "weights='swap' fails the check on it, weights='report' (the default) lists it here, "
    "weights='off' leaves the check out"
)

_SERVER = {
    FOLDED: "a server that loads its new state dict with load_constants(..., "
    "check_full_update=True) fails on {names}; one that loads only the names "
    "get_constant_fqns() lists succeeds, and the engine keeps answering with the compiled "
    "{names}",
    REFUSED: "a server's load_constants raises on {names}",
    IGNORED: "a server's load_constants succeeds, and the engine keeps answering with the "
    "compiled {names}",
    DIFFERS: "a server's load_constants succeeds, and with the new {names} the engine "
    "answers otherwise than eager",
    UNSUPPLIED: "a server's load_constants(..., check_full_update=True) fails on every state "
    "dict: the engine also wants {names}, which no state dict holds",
}


def quoted(names: Sequence[str], first: int | None = None) -> str:
    """``'a', 'b'``; with ``first``, the first names and how many more."""
    shown = ", ".join(f"'{name}'" for name in names[:first])
    more = len(names) - first if first is not None else 0
    return shown + (f" and {more} more" if more > 0 else "")


def finding_line(found: Mapping[str, Any]) -> str:
    """One weight the engine cannot take, and why."""
    name, reason = f"'{found['weight']}'", found["reason"]
    error = found.get("error") or ""
    if reason == FOLDED:
        answer = (
            f"load_constants refuses it ({error})"
            if error
            else "load_constants accepts it and changes nothing"
        )
        line = (
            f"{name}: not among the engine's constants (get_constant_fqns()): its value was "
            f"folded into the compiled code at compile time; {answer}"
        )
    elif reason == REFUSED:
        line = f"{name}: listed by get_constant_fqns(), but load_constants refuses a new value ({error})"
    elif reason == UNSUPPLIED:
        line = f"{name}: an engine constant that is no weight of the module ({error})"
    elif reason == DIFFERS and found.get("together"):
        line = (
            f"{name}: the engine takes every weight and differs from eager holding the same "
            f"weights, and no single weight's swap alone differs: {error}"
        )
    elif reason == DIFFERS:
        line = (
            f"{name}: load_constants accepts a new value, and the engine's answer moves with "
            "it but not to eager's"
        )
    else:
        line = f"{name}: load_constants accepts a new value, and the engine does not follow it" + (
            " (only together with the others named)" if found.get("together") else ""
        )
    if found.get("unmeasured"):
        line += f" (a swap of it is not measured: {found['unmeasured']})"
    return line


def server_lines(findings: Sequence[Mapping[str, Any]], first: int | None = None) -> list[str]:
    """What a server that swaps weights sees, one line per kind of finding (``first``: the
    names of each kind shown, the rest counted)."""
    lines = []
    for reason, text in _SERVER.items():
        names = [str(found["weight"]) for found in findings if found["reason"] == reason]
        if names:
            lines.append("what a server sees: " + text.format(names=quoted(names, first)))
    return lines


def measured_line(part: Mapping[str, Any]) -> str:
    """The difference the swap made, where one was measured."""
    difference = part.get("difference")
    if not isinstance(difference, Mapping):
        return ""
    return (
        f"measured: after the swap of weight set {difference.get('set')}, the engine differs "
        f"from eager holding the same weights by up to {difference.get('max_abs', 0):.3g} "
        f"({difference.get('location')})"
    )


def remedy_lines(findings: Sequence[Mapping[str, Any]], runtime_folding: bool) -> list[str]:
    """The remedy of each kind of finding: runtime constant folding for a folded weight
    (where the program is not compiled with it already)."""
    reasons = {found["reason"] for found in findings}
    lines = []
    if FOLDED in reasons and not runtime_folding:
        lines.append(FOLDING_REMEDY)
    if reasons - {FOLDED} or (FOLDED in reasons and runtime_folding):
        lines.append(OTHER_REMEDY)
    return lines


def headline(findings: Sequence[Mapping[str, Any]], first: int | None = None) -> str:
    names = [str(found["weight"]) for found in findings]
    plural = "s" if len(names) != 1 else ""
    return (
        f"weight swap: the engine cannot take {len(names)} weight{plural}: {quoted(names, first)}"
    )


def failure_text(part: Mapping[str, Any]) -> str:
    """The failure under ``weights="swap"``: first line, then the detail lines."""
    findings = part.get("findings") or []
    lines = [
        headline(findings),
        *(finding_line(found) for found in findings),
        *server_lines(findings),
        measured_line(part),
        *remedy_lines(findings, bool(part.get("runtime_folding"))),
        f"weight sets: {sets_line(part)}; {MODES}",
    ]
    return "\n".join(line for line in lines if line)


def sets_line(part: Mapping[str, Any]) -> str:
    """``1 of 3 compared (stopped: a finding)``."""
    stopped = part.get("stopped") or ""
    tail = f" (stopped: {stopped})" if stopped else ""
    return f"{part.get('ran', 0)} of {part.get('planned', 0)} compared{tail}"


def write_weights_hazards(terminal: pytest.TerminalReporter, records: Sequence[Any]) -> None:
    """The summary's section: per program (its first test), the weights its engine cannot
    take, what a server sees and the remedy; the checks that failed on them say it there."""
    shown: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for record in records:
        part = record.other_fields.get("weights")
        if record.outcome != "passed" or not isinstance(part, Mapping):
            continue
        if part.get("findings"):
            shown.setdefault(f"{record.program}@{record.device}", (record.label, part))
    if not shown:
        return
    count = len(shown)
    terminal.write_sep(
        "-",
        f"aoti: weights a server cannot swap ({count} program{'s' if count != 1 else ''}; "
        "not failures)",
    )
    for label, part in shown.values():
        findings = part["findings"]
        terminal.write_line(f"{label}: {headline(findings, FIRST_NAMES)}")
        lines = [*grouped_lines(findings), *server_lines(findings, FIRST_NAMES)]
        for line in [*lines, measured_line(part)]:
            if line:
                terminal.write_line(f"    {line}")
        for line in remedy_lines(findings, bool(part.get("runtime_folding"))):
            terminal.write_line(f"  {line}")
    terminal.write_line(f"  {MODES}")


FIRST_NAMES = 3
"""Weights named in the summary's line of one kind (the rest counted)."""
_GROUPED = {
    FOLDED: "folded into the compiled code (not among get_constant_fqns()): the engine "
    "keeps their compiled values",
    REFUSED: "refused by load_constants",
    IGNORED: "accepted by load_constants and not followed by the engine",
    UNSUPPLIED: "engine constants that are no weight of the module",
}


def grouped_lines(findings: Sequence[Mapping[str, Any]]) -> list[str]:
    """The summary's lines of a program's findings: one per kind (its count and first
    names), and one of its own to each weight whose swap changed the engine's answers."""
    lines = []
    for reason, text in _GROUPED.items():
        names = [str(found["weight"]) for found in findings if found["reason"] == reason]
        if names:
            lines.append(f"{len(names)} {text}: {quoted(names, FIRST_NAMES)}")
    lines += [finding_line(found) for found in findings if found["reason"] == DIFFERS]
    return lines
