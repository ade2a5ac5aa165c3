"""The check budget: how deep a large program's searches go is decided from its size before
the first item, never from the clock; a count the user gives is never shortened; what a run
leaves out, the next run of the same test continues; the summary says so in one line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_aoti.checks.budget import (
    LARGE_FROM_BYTES,
    READ_ALLOWANCE_BYTES,
    CheckBudget,
    left_by_search,
)

LARGE = """
import time

from torch.export import Dim

from pytest_aoti.checks import budget as budget_module

PROGRAM_BYTES = 2 * 4 * 4 * 4  # two 4x4 float32 inputs, no weights


class SlowMulAdd(torch.nn.Module):
    '''a * b + 1; eager sleeps ``pause`` seconds a call (the exported graph does not).'''

    def __init__(self, pause=0.0):
        super().__init__()
        self.pause = pause

    def forward(self, a, b):
        if self.pause and not torch.compiler.is_exporting():
            time.sleep(self.pause)
        return a * b + 1


def inputs():
    generator = torch.Generator().manual_seed(5)
    return torch.randn(4, 4, generator=generator), torch.randn(4, 4, generator=generator)


@pytest.fixture(autouse=True)
def large(monkeypatch):
    # this small program stands for a large one: its searches read it 6 times in all
    monkeypatch.setattr(budget_module, "LARGE_FROM_BYTES", 0)
    monkeypatch.setattr(budget_module, "READ_ALLOWANCE_BYTES", 6 * PROGRAM_BYTES)
"""


def _records(report: Path) -> dict[str, Any]:
    checks = json.loads(report.read_text())["checks"]
    return {r["test"].split("::")[-1].removesuffix("[cpu]"): r for r in checks}


def _counts(record: dict[str, Any]) -> dict[str, tuple[int, int, int]]:
    """``(ran, planned, left)`` of each search of a record."""
    checks = record["budget"]["checks"]
    return {name: (item["ran"], item["planned"], item["left"]) for name, item in checks.items()}


@pytest.mark.compiles
def test_a_large_programs_counts_do_not_depend_on_the_clock(
    run_aoti: Callable[..., pytest.RunResult], tmp_path: Path
) -> None:
    report = tmp_path / "aoti.json"
    source = (
        LARGE
        + """
def test_depth_quick(aoti):
    aoti.check(SlowMulAdd(0.0), inputs())


def test_depth_slow(aoti):
    aoti.check(SlowMulAdd(0.2), inputs())


def test_depth_steps(aoti):
    # a decode loop of two steps: each draw reads the program twice
    aoti.check(
        SlowMulAdd(), inputs(), steps=2, next_inputs=lambda out, args, kwargs: ((out, args[1]), {})
    )
"""
    )
    result = run_aoti(source, f"--aoti-report={report}", "--aoti-budget=0.05")
    result.assert_outcomes(passed=3)
    records = _records(report)
    quick, slow = records["test_depth_quick"], records["test_depth_slow"]
    assert slow["compile_seconds"] == 0, "one program: the sleep is not in the graph"
    assert _counts(quick) == _counts(slow)
    # six reads, six values draws: none left for the probes' load and variants
    assert _counts(quick)["values"] == (6, 16, 10)
    assert quick["values"]["checked"] == 6 and quick["values"]["left"] == 10
    assert _counts(quick)["probes"][0] == 0
    assert quick["budget"]["program_bytes"] == 128
    assert quick["budget"]["allowance_bytes"] == 6 * 128
    # an eager call of 0.2 s is no reason to check less
    assert slow["check_seconds"] > 6 * 0.2
    # steps x draws count: three draws of two steps each
    stepped = records["test_depth_steps"]
    assert _counts(stepped)["values"] == (3, 16, 13)
    assert stepped["values"]["steps"] == 2 and stepped["steps"]["steps"] == 2


@pytest.mark.compiles
def test_what_the_user_asks_for_is_never_cut(
    run_aoti: Callable[..., pytest.RunResult], tmp_path: Path
) -> None:
    report = tmp_path / "aoti.json"
    source = (
        LARGE
        + """
def test_asked_for(aoti):
    aoti.check(
        SlowMulAdd(),
        inputs(),
        dynamic_shapes=({0: Dim("batch", min=2, max=16)}, {0: Dim("batch", min=2, max=16)}),
        examples=8,
        values_draws=24,
        budget=0.001,
    )
"""
    )
    result = run_aoti(source, f"--aoti-report={report}")
    result.assert_outcomes(passed=1)
    record = _records(report)["test_asked_for"]
    checks = record["budget"]["checks"]
    assert checks["values"]["given"] and checks["values"]["ran"] == 24
    assert record["values"]["checked"] == 24 and record["values"]["given"]
    assert checks["generated"]["given"] and checks["generated"]["ran"] == 8
    assert checks["probes"]["ran"] == 0 and not checks["probes"]["given"]


@pytest.mark.compiles
def test_the_next_run_continues_what_a_large_program_left_out(
    run_aoti: Callable[..., pytest.RunResult], tmp_path: Path
) -> None:
    source = (
        LARGE
        + """
def test_continued(aoti):
    aoti.check(SlowMulAdd(), inputs())


def test_continued_too(aoti):
    aoti.check(SlowMulAdd(), inputs())


def test_continued_three(aoti):
    aoti.check(SlowMulAdd(), inputs())
"""
    )
    counts = []
    for run in range(4):
        report = tmp_path / f"aoti-{run}.json"
        verbose = ("-v",) if run == 1 else ()
        result = run_aoti(source, f"--aoti-report={report}", "--aoti-budget=5%", *verbose)
        result.assert_outcomes(passed=3)
        record = _records(report)["test_continued"]
        counts.append((_counts(record)["values"], record["budget"]["checks"]["values"]["runs"]))
        lines = [line for line in result.outlines if "large program" in line]
        if run == 0:  # three cut checks, one line
            assert len(lines) == 1, lines
            result.stdout.fnmatch_lines(
                [
                    "aoti: 1 large program left 30 values draws and * probes for later runs, "
                    "and 3 C++ loader input sets that load the program again; "
                    "--aoti-budget=off runs them now (-v names the tests)"
                ]
            )
        if run == 1:  # -v: the tests by name
            result.stdout.fnmatch_lines(
                [
                    "aoti: 1 large program left 12 values draws and *",
                    "    test_inner.py::test_continued[[]cpu[]]: 4 values draws, * probes and "
                    "1 C++ loader input set",
                ]
            )
    # each run draws the next six of sixteen, then nothing is left
    assert counts == [((6, 16, 10), 1), ((6, 16, 4), 2), ((4, 16, 0), 3), ((0, 16, 0), 3)]


def test_a_small_program_runs_every_default_search_in_full() -> None:
    small = CheckBudget.of(0.05, LARGE_FROM_BYTES - 1, calls=2)
    assert not small.limited and small.allowance is None
    assert small.plan("values", 16, floor=2) == 16
    assert small.plan("probes", 400, loads=True) == 400
    assert left_by_search(small.to_json()) == {}
    off = CheckBudget.of(float("inf"), 10 * LARGE_FROM_BYTES)
    assert off.off and not off.limited and off.plan("values", 16) == 16
    assert off.to_json()["share"] == "off"


def test_a_large_programs_searches_share_what_its_size_allows() -> None:
    size = 540 * 2**20  # a 135M-parameter float32 model
    budget = CheckBudget.of(0.05, size)
    assert budget.allowance == READ_ALLOWANCE_BYTES
    assert budget.plan("values", 16, floor=2) == 2
    assert budget.plan("probes", 12, loads=True) == 0  # a load and a variant do not fit
    assert budget.plan("generated", 8) == 0
    assert budget.plan("weights", 3, given=True) == 3  # asked for: all
    budget.ran("values", 2)
    assert budget.checks["values"].left == 14 and budget.checks["values"].stopped == "budget"
    assert left_by_search(budget.to_json()) == {"values": 14, "probes": 12, "generated": 8}
    # what earlier runs ran is not run again; the floor holds whatever the allowance
    later = CheckBudget.of(0.05, size, calls=2)
    assert later.plan("values", 16, earlier=14, floor=2) == 2
    assert later.checks["values"].left == 0 and later.checks["values"].stopped == ""
    # twice the budget, twice the allowance; a search that loads again, to budget="off"
    doubled = CheckBudget.of(0.1, size)
    assert doubled.plan("values", 16) == 4
    doubled.left_out("cpp_loader", 1)
    assert left_by_search(doubled.to_json(), "off") == {"cpp_loader": 1}
