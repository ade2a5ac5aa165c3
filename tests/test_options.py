"""One row per option: a row of ``settings.OPTIONS`` drives the command line, the ini file,
the marker (its keywords and help line), the ``aoti.check`` keyword and the check's plan;
a check is one entry of ``checks.catalog.CHECKS``."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from pytest_aoti import settings
from pytest_aoti.checks import catalog
from pytest_aoti.checks.base import CheckContext, CheckPlan, Outcome
from pytest_aoti.compiling.randomness import RandomOp
from pytest_aoti.settings import OPTIONS, AotiSettings, Option
from pytest_aoti.tester import CheckDefaults


def _probe_level(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _level_problem(name: str, value: Any) -> str:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    return "" if ok else f"{name} must be a positive int, got {value!r}"


PROBE_ROW = Option(
    "aoti-probe-level",
    _probe_level,
    1,
    "Probe level of every AOTI check. Default: 1.",
    check="probe_level",
    marker=True,
    keyword=True,
    problem=_level_problem,
)


class ProbeCheck:
    """A check that reads its option from the plan and reports it as a figure."""

    name = "probe"

    def __init__(self) -> None:
        self.seen: list[int] = []

    def applies(self, plan: CheckPlan) -> bool:
        return True

    def run(self, program: Any, plan: CheckPlan, context: CheckContext) -> Outcome:
        self.seen.append(plan.probe_level)
        return Outcome(figures={"probe_level": plan.probe_level})


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> ProbeCheck:
    """The fake row and its check, added as a new option and check would be."""
    check = ProbeCheck()
    monkeypatch.setattr(settings, "OPTIONS", (*OPTIONS, PROBE_ROW))
    monkeypatch.setattr(catalog, "CHECKS", [*catalog.CHECKS, check])
    return check


def test_a_row_reaches_marker_help_keywords_and_defaults(probe: ProbeCheck) -> None:
    assert "probe_level=None" in settings.marker_help()
    assert settings.marker_options()[-1] == "probe_level"
    assert settings.keyword_options()[-1] == "probe_level"
    assert CheckDefaults().probe_level == 1
    assert CheckDefaults().overridden(probe_level=4).probe_level == 4
    read = AotiSettings(check_options={"probe_level": 3})
    assert read.check_defaults()["probe_level"] == 3
    assert CheckDefaults().overridden(**read.check_defaults()).option_values()["probe_level"] == 3
    assert settings.option_problem("probe_level", 0) == "probe_level must be a positive int, got 0"


def test_without_the_row_the_name_is_unknown() -> None:
    assert "probe_level" not in settings.marker_help()
    with pytest.raises(AttributeError):
        CheckDefaults().probe_level  # noqa: B018
    with pytest.raises(TypeError, match="unknown check option"):
        CheckDefaults().overridden(probe_level=4)


def test_rows_and_settings_agree() -> None:
    """Every session row is an ``AotiSettings`` field; every per-check row with a command
    line names the ``CheckDefaults`` value it sets; keywords are unique."""
    fields = set(AotiSettings.__dataclass_fields__)
    for option in OPTIONS:
        if option.parse is not None and not option.check:
            assert option.attribute in fields, option.name
        if option.parse is None:
            assert option.marker or option.keyword, option.name
    names = [option.keyword_name for option in OPTIONS if option.per_check]
    assert len(names) == len(set(names))
    # the marker's help line is the one pytest showed before the rows drove it
    assert settings.marker_help().startswith(
        "aoti(rtol=None, atol=None, strict=None, inductor_configs=None, examples=None, "
        "max_dim=None, localize=None, random=None, probes=None, probes_skip=None): "
    )


PROBE_TESTS = """
def test_command_line_value(aoti):
    result = aoti.check(DoubleThenCos(), (example(),))
    assert result.figures["probe_level"] == 3
    # the checks that applied, in the catalog's order; timing's figures are on the result
    assert result.checks == ("parity", "aliasing", "probes", "timing", "probe")
    assert result.engine_seconds > 0 and result.eager_seconds > 0

@pytest.mark.aoti(probe_level=5)
def test_marker_value(aoti):
    assert aoti.check(DoubleThenCos(), (example(),)).figures["probe_level"] == 5

@pytest.mark.aoti(probe_level=5)
def test_keyword_value(aoti):
    assert aoti.check(DoubleThenCos(), (example(),), probe_level=7).figures["probe_level"] == 7

def test_bad_keyword_value(aoti):
    with pytest.raises(TypeError, match="probe_level must be a positive int, got 0"):
        aoti.check(DoubleThenCos(), (example(),), probe_level=0)

def test_unknown_keyword(aoti):
    with pytest.raises(TypeError, match="aoti.check.. got unknown option.s. probe_levle"):
        aoti.check(DoubleThenCos(), (example(),), probe_levle=2)

@pytest.mark.aoti(probe_level="high")
def test_bad_marker_value(aoti):
    pass

def test_declared_signature_is_its_own_kind(aoti):
    with pytest.raises(AotiCheckError) as excinfo:
        aoti.check(DoubleThenCos(), (example(),), mutates={})
    assert excinfo.value.kind == "signature"
    assert str(excinfo.value).startswith(
        "mutated inputs differ: expected none, the program mutates {'x'}"
    )
"""


def test_a_row_drives_flag_marker_keyword_and_plan(
    probe: ProbeCheck, run_aoti, pytester: pytest.Pytester
) -> None:
    result = run_aoti(PROBE_TESTS, "--aoti-probe-level=3")
    result.assert_outcomes(passed=6, errors=1)
    result.stdout.fnmatch_lines(
        ["E * @pytest.mark.aoti: probe_level must be a positive int, got 'high'"]
    )
    assert probe.seen == [3, 5, 7]  # the signature check failed before the probe ran

    markers = pytester.runpytest("--markers")
    markers.stdout.fnmatch_lines(["@pytest.mark.aoti(rtol=None, *, probe_level=None): *"])
    helped = pytester.runpytest("--help")
    helped.stdout.fnmatch_lines(["*--aoti-probe-level=PROBE_LEVEL*", "*aoti_probe_level*"])


def test_a_row_reads_its_ini_key(probe: ProbeCheck, run_aoti, pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\naoti_probe_level = 4\n")
    result = run_aoti(
        """
        def test_ini_value(aoti):
            assert aoti.check(DoubleThenCos(), (example(),)).figures["probe_level"] == 4
        """
    )
    result.assert_outcomes(passed=1)


def test_the_catalog_lists_each_check_once_with_timing_last() -> None:
    names = [check.name for check in catalog.CHECKS]
    assert names == [
        "signature",
        "random",
        "parity",
        "aliasing",
        "memory",
        "threads",
        "generated",
        "probes",
        "timing",
    ]
    plan = CheckPlan(module=None, input_sets=[], tolerance=None, calls=1)  # no module needed
    plan.options = {"threads": 1, "max_extra_bytes": None, "examples": 20}
    applying = [check.name for check in catalog.CHECKS if check.applies(plan)]
    # no declaration, one thread, no memory limit, no dynamic dims; probes by default
    assert applying == ["parity", "aliasing", "probes", "timing"]
    plan.options = {"threads": 4, "max_extra_bytes": 0, "examples": 20}
    plan.mutates, plan.dynamic_shapes = {}, {"x": {0: "batch"}}
    # the random check applies only to a program that draws random numbers
    assert [check.name for check in catalog.CHECKS if check.applies(plan)] == [
        name for name in names if name != "random"
    ]
    # and then no check that compares values does
    plan.random_ops = (RandomOp(op="aten.bernoulli.p", node="bernoulli"),)
    assert [check.name for check in catalog.CHECKS if check.applies(plan)] == [
        "signature",
        "random",
        "memory",
        "timing",
    ]
