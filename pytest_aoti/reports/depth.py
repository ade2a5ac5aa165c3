"""The summary's one line on what the check budget left out: the items of large programs'
searches that later runs continue, and those only ``--aoti-budget=off`` runs, added up over
the whole run (xdist workers' records included), with the tests by name under ``-v``. Pure
text from the records' ``budget`` field: no torch."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from pytest_aoti.checks.budget import left_by_search

ITEMS = {
    "values": ("values draw", "values draws"),
    "probes": ("probe", "probes"),
    "generated": ("generated shape", "generated shapes"),
    "weights": ("weight set", "weight sets"),
    "cpp_loader": ("C++ loader input set", "C++ loader input sets"),
}
"""What one item of each search is called (a plugin's own search: ``<name> item``)."""


def _items(counts: Counter[str]) -> str:
    parts = []
    for name, count in counts.items():
        one, many = ITEMS.get(name, (f"{name} item", f"{name} items"))
        parts.append(f"{count} {one if count == 1 else many}")
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def left_out_lines(records: Sequence[Any], *, verbose: bool = False) -> list[str]:
    """One line for the run (none when the budget left nothing out); under ``verbose``,
    one more per test that left items out."""
    later: Counter[str] = Counter()
    off: Counter[str] = Counter()
    programs: set[str] = set()
    by_test: list[str] = []
    for record in records:
        budget = record.other_fields.get("budget")
        for_later, for_off = left_by_search(budget), left_by_search(budget, "off")
        if not for_later and not for_off:
            continue
        programs.add(f"{record.program}@{record.device}")
        later.update(for_later)
        off.update(for_off)
        by_test.append(f"    {record.label}: {_items(Counter({**for_later, **for_off}))}")
    if not programs:
        return []
    count = len(programs)
    parts = []
    if later:
        parts.append(f"{_items(later)} for later runs")
    if off:
        parts.append(f"{_items(off)} that load the program again")
    line = (
        f"aoti: {count} large program{'s' if count != 1 else ''} left "
        f"{', and '.join(parts)}; --aoti-budget=off runs them now"
    )
    if not verbose:
        return [line + " (-v names the tests)"]
    return [line, *by_test]
