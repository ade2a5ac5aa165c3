"""The check budget: the searches beyond the example share a part of the compile's seconds;
each stops after its floor once it is spent, and the record and the summary say so."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_aoti.checks.budget import MINIMUM_SECONDS, SHARE_ALONE_FROM_BYTES, CheckBudget

BUDGETED = """
from pytest_aoti.checks import budget as budget_module


class MulAdd(torch.nn.Module):
    def forward(self, a, b):
        return a * b + 1


def inputs():
    generator = torch.Generator().manual_seed(5)
    return torch.randn(4, 4, generator=generator), torch.randn(4, 4, generator=generator)


def test_tight(aoti, monkeypatch):
    # no time at all: what the floors run, and what the summary says of the rest
    monkeypatch.setattr(budget_module, "MINIMUM_SECONDS", 0.0)
    aoti.check(MulAdd(), inputs(), budget=1e-9)


@pytest.mark.aoti(budget="off")
def test_off(aoti):
    aoti.check(MulAdd(), inputs())
"""


@pytest.mark.compiles
def test_a_spent_budget_stops_the_searches_after_their_floor_and_says_so(
    run_aoti: Callable[..., pytest.RunResult], tmp_path: Path
) -> None:
    report = tmp_path / "aoti.json"
    result = run_aoti(BUDGETED, f"--aoti-report={report}")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_tight*: the check budget (0% of the * s compile, 0.0 s) cut "
            "values ran 2 of 16, probes ran 0 of *; budget=off (or --aoti-budget=off) runs "
            "them all",
        ]
    )
    records = {r["test"].split("::")[-1]: r for r in json.loads(report.read_text())["checks"]}
    tight, off = records["test_tight[cpu]"], records["test_off[cpu]"]
    assert tight["budget"]["checks"]["values"] == {"ran": 2, "planned": 16, "stopped": "budget"}
    assert tight["budget"]["checks"]["probes"]["ran"] == 0
    assert tight["values"]["checked"] == 2
    assert off["budget"]["share"] == "off" and off["budget"]["seconds"] is None
    assert off["budget"]["checks"]["values"] == {"ran": 16, "planned": 16, "stopped": ""}
    assert off["values"]["checked"] == 16
    assert {"crash_screen", "parity", "values", "probes"} <= set(tight["seconds_by_check"])
    # a small program: its calls are made here after the child's screen, none served
    assert tight["engine_calls"] is None


def test_the_budget_is_a_share_of_the_recorded_compile() -> None:
    budget = CheckBudget.of(0.25, compile_seconds=8.0)
    assert budget.seconds == 2.0 and budget.left() == 2.0
    assert budget.allows(done=0, floor=2) and budget.allows(done=1, floor=2)
    budget.spent = 2.5
    assert budget.left() == 0.0 and not budget.fits(0.1)
    assert budget.allows(done=1, floor=2)  # the floor runs whatever the budget
    assert not budget.allows(done=2, floor=2)
    budget.ran("values", 2, 16)
    budget.ran("probes", 3, 3)
    assert "cut values ran 2 of 16;" in budget.cut_short()
    # a small model's few seconds of compile: at least a second, its searches all run
    assert CheckBudget.of(0.05, compile_seconds=6.0).seconds == MINIMUM_SECONDS
    # a large package's budget is its share alone, said without the least
    large = CheckBudget.of(0.05, compile_seconds=9.0, package_bytes=SHARE_ALONE_FROM_BYTES)
    assert large.seconds == pytest.approx(0.45)
    large.ran("values", 6, 16)
    assert "(5% of the 9.0 s compile, 0.5 s) cut values ran 6 of 16;" in large.cut_short()
    assert "(25% of the 8.0 s compile, at least 1 s: 2.0 s) cut values ran 2" in budget.cut_short()
    # no recorded compile time (an older entry), or off: no limit, today's counts
    assert CheckBudget.of(0.25, compile_seconds=0.0).seconds is None
    assert CheckBudget.of(float("inf"), compile_seconds=8.0).left() is None
    assert CheckBudget.of(float("inf"), 8.0).to_json()["share"] == "off"
