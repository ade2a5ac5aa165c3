"""The C++ loader check's lines: the session header's (why the machine skips it) and the
terminal summary's (what ran, what it cost, what was skipped and why). Pure text."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

LOADER = "C++ loader (AOTIModelPackageLoader)"


def header_line(reason: str, remembered_in: str = "") -> str:
    """The header's one line for a machine that skips the check."""
    line = f"aoti: {LOADER} check skipped on this machine: {reason}"
    if remembered_in:
        line += f" (remembered in {remembered_in}; remove it to build again)"
    return line


def summary_lines(parts: Sequence[Mapping[str, Any] | None]) -> list[str]:
    """The summary's lines from every record's ``cpp_loader`` field (None: did not run)."""
    ran = [part for part in parts if part and part.get("ran")]
    skipped = Counter(  # the check budget's own line counts those it left out
        str(part.get("skipped", ""))
        for part in parts
        if part and not part.get("ran") and not part.get("budget")
    )
    lines = []
    if ran:
        exact = sum(1 for part in ran if part.get("exact"))
        load = sum(float(part.get("load_seconds") or 0.0) for part in ran)
        calls = sum(float(part.get("call_seconds") or 0.0) for part in ran)
        starts = [float(part["start_seconds"]) for part in ran if part.get("start_seconds")]
        builds = [float(part["build_seconds"]) for part in ran if part.get("build_seconds")]
        cost = f"runner start {sum(starts):.2f} s, loads {load:.3f} s, calls {calls:.4f} s"
        if builds:
            cost = f"runner built in {sum(builds):.0f} s, " + cost
        lines.append(
            f"aoti: {LOADER}: {len(ran)} check(s) ran their package without Python, "
            f"{exact} bit for bit against the Python engine ({cost})"
        )
    for reason, count in sorted(skipped.items()):
        lines.append(f"aoti: {LOADER} check skipped in {count} check(s): {reason}")
    return lines
