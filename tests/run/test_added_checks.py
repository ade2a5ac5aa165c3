"""Checks a downstream conftest adds through the ``pytest_aoti_checks`` hook: they run after
the built-in checks of their phase, their figures reach the result, the JSON record and
JUnit, and the error they raise fails the test with its own message."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_aoti import AotiUsageError, Check, CheckContext, CheckPlan, Outcome
from pytest_aoti.hook_order import Answer
from pytest_aoti.run import catalog
from pytest_aoti.run.added import plugin_checks

LATENCY_BUDGET = Path(__file__).resolve().parents[1] / "samples" / "latency_budget.py"
"""The hooks page's example check, run here as written."""

LATENCY_CONFTEST = (
    LATENCY_BUDGET.read_text(encoding="utf-8")
    .replace("return [LatencyBudget()]", "return [LatencyBudget(), Clash()]")
    .replace(
        'latency budget")',
        'latency budget")\n'
        '    config.addinivalue_line("markers", "clash: report a figure of the timing check")',
    )
    + """

class Clash:
    name, phase = "clash", "engine"

    def applies(self, plan, context):
        return context.item is not None and context.item.get_closest_marker("clash") is not None

    def run(self, plan, context):
        return Outcome(figures={"engine_seconds": 0.0})
"""
)


def _records(path: Path) -> dict[str, dict[str, Any]]:
    return {record["test"]: record for record in json.loads(path.read_text())["checks"]}


@pytest.mark.compiles
def test_a_conftest_check_reports_figures_and_fails_with_its_own_message(
    run_aoti: Callable[..., pytest.RunResult], pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makeconftest(LATENCY_CONFTEST)
    report, junit = tmp_path / "aoti.json", tmp_path / "junit.xml"
    result = run_aoti(
        """
        @pytest.mark.budget(60.0)
        def test_within(aoti):
            result = aoti.check(DoubleThenCos(), (example(),), mutates={"x": example() * 2})
            assert result.figures["budget"] == 60.0
            # after the default plugins' checks, before the one that judges them all
            assert result.checks[-3:] == ("timing", "latency", "precision")

        @pytest.mark.budget(0.0)
        def test_over(aoti):
            aoti.check(DoubleThenCos(), (example(),), mutates={"x": example() * 2})

        def test_not_asked(aoti):
            result = aoti.check(DoubleThenCos(), (example(),), mutates={"x": example() * 2})
            assert "latency" not in result.checks and "budget" not in result.figures

        @pytest.mark.clash
        def test_clash(aoti):
            aoti.check(DoubleThenCos(), (example(),), mutates={"x": example() * 2})
        """,
        f"--aoti-report={report}",
        f"--junitxml={junit}",
    )
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(
        ["E *.AotiCheckError: engine call took * s, over the budget of 0.0 s"]
    )
    result.stdout.fnmatch_lines(
        [
            "E * check 'clash' reports figure 'engine_seconds', which check 'timing' reports "
            "too: rename the figure of 'clash'"
        ]
    )
    records = _records(report)
    within = records["test_inner.py::test_within[cpu]"]
    assert within["check_figures"] == {"latency": {"budget": 60.0, "engine_calls_timed": True}}
    assert within["engine_seconds"] is not None  # the record's own field, untouched
    over = records["test_inner.py::test_over[cpu]"]["finding"]
    assert over["check"] == "latency"
    assert over["message"].startswith("engine call took ")
    assert "check_figures" not in records["test_inner.py::test_not_asked[cpu]"]
    properties = {
        (case.get("name"), prop.get("name")): prop.get("value")
        for case in ET.parse(junit).getroot().iter("testcase")
        for prop in case.iter("property")
    }
    assert properties[("test_within[cpu]", "aoti_latency_budget")] == "60.0"
    assert properties[("test_within[cpu]", "aoti_latency_engine_calls_timed")] == "True"


class _Named:
    def __init__(self, name: Any, phase: Any = "engine") -> None:
        self.name, self.phase = name, phase

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        return True

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        return Outcome()


def added_checks(results: list[Any]) -> tuple[Check, ...]:
    return plugin_checks([Answer(result) for result in results], core=catalog.CHECKS).added


def test_added_checks_keep_the_hook_order_and_skip_empty_results() -> None:
    first, second, third = _Named("a"), _Named("b", "eager"), _Named("c", "exported")
    checks: tuple[Check, ...] = added_checks([[first], None, [second, third], []])
    assert checks == (first, second, third)


def test_the_default_plugins_checks_come_in_the_list_s_order_a_trylast_one_last() -> None:
    memory, values, precision, mine = (_Named(n) for n in ("m", "v", "p", "mine"))
    # as answers_in_order gives them: the default plugins in the list's order, then others
    answers = [
        Answer([memory], "aoti-memory"),
        Answer([values], "aoti-values"),
        Answer([precision], "aoti-precision", trylast=True),
        Answer([mine]),
    ]
    found = plugin_checks(answers)
    assert found.in_order() == (memory, values, mine, precision)
    assert found.added == (mine,)
    with pytest.raises(AotiUsageError, match="'v', the name of a built-in check"):
        plugin_checks([*answers, Answer([_Named("v")])])


@pytest.mark.parametrize(
    ("check", "message"),
    [
        (_Named("parity"), "a check named 'parity', the name of a built-in check"),
        (_Named(""), "a check needs a name, a word such as 'latency'"),
        (_Named("late", "compiled"), "its phase is 'compiled'; a check's phase is one of eager"),
        (object(), "a check needs a name"),
    ],
)
def test_a_check_that_is_not_one_is_a_usage_error(check: Any, message: str) -> None:
    with pytest.raises(AotiUsageError, match=message.replace("(", r"\(")):
        added_checks([[check]])


def test_two_added_checks_of_one_name_are_a_usage_error() -> None:
    with pytest.raises(AotiUsageError, match="'twin', the name of another added check"):
        added_checks([[_Named("twin")], [_Named("twin")]])


def test_a_check_without_run_is_a_usage_error() -> None:
    class NoRun:
        name, phase = "norun", "engine"

        def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
            return True

    with pytest.raises(AotiUsageError, match=r"it has no run\(plan, context\) method"):
        added_checks([[NoRun()]])
