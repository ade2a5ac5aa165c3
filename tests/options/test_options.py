"""A plugin's per-check option is one field of its options class plus the check that reads it.

The field's metadata is its row: it drives the command line, the ini file, the marker
(its keywords and help line), the ``aoti.check`` keyword, ``CheckDefaults`` and the plan
(``plan.options.of(LevelOptions).probe_level``). The tests below declare a feature and a
check the way a plugin would, and nothing else: a catalog with the feature stands for the
run's (its plugin registered), and the check joins the catalog of checks.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields, replace
from typing import Any

import pytest
import torch

from pytest_aoti.checks.base import PHASES, CheckContext, CheckPlan, Outcome
from pytest_aoti.compiling.random_ops import RandomOp
from pytest_aoti.errors import AotiUsageError
from pytest_aoti.options import keywords, resolve
from pytest_aoti.options.catalog import Catalog
from pytest_aoti.options.defaults import CheckDefaults
from pytest_aoti.options.feature import Feature
from pytest_aoti.options.fields import per_check
from pytest_aoti.options.parsers import ValueProblem
from pytest_aoti.options.settings import AotiSettings
from pytest_aoti.run import catalog


@pytest.fixture
def run() -> Catalog:
    """The run's options: the whole option table, also where the run blocks the feature
    plugins."""
    from pytest_aoti.plugins import default_catalog

    return default_catalog()


def _probe_level(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _check_level(name: str, value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ValueProblem(f"{name} must be a positive int, got {value!r}")


@dataclass(frozen=True)
class LevelOptions:
    """A plugin's options class with one field: the whole of a new option."""

    probe_level: int = per_check(
        1,
        "Probe level of every AOTI check. Default: 1.",
        parse=_probe_level,
        check=_check_level,
        marker=True,
        keyword=True,
    )


LEVEL = Feature("level", "Probe levels", options=LevelOptions)


class ProbeCheck:
    """A check that reads its option from the plan and reports it as a figure."""

    name = "probe"
    phase = "engine"

    def __init__(self, catalog: Catalog) -> None:
        self.seen: list[int] = []
        self.catalog = catalog
        """The run's options with the new feature's (its plugin registered)."""

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        return True

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        level = plan.options.of(LevelOptions).probe_level
        self.seen.append(level)
        return Outcome(figures={"probe_level": level})


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch, run: Catalog) -> ProbeCheck:
    """The new feature and its check, registered as a plugin would register them."""
    check = ProbeCheck(Catalog([*run.features, LEVEL]))
    monkeypatch.setattr(catalog, "CHECKS", [*catalog.CHECKS, check])
    return check


def test_a_field_reaches_marker_help_keywords_and_defaults(probe: ProbeCheck) -> None:
    run = probe.catalog
    assert "probe_level=None" in run.marker_help()
    assert run.marker_options()[-1] == "probe_level"
    assert run.keyword_options()[-1] == "probe_level"
    row = {option.keyword_name: option for option in run.rows()}["probe_level"]
    assert (row.name, row.ini_key, row.per_check) == ("aoti-probe-level", "aoti_probe_level", True)
    assert CheckDefaults(catalog=run).options.of(LevelOptions).probe_level == 1
    read = AotiSettings(checks=run.check_options({"probe_level": 3}))
    layered = resolve.layered_defaults(
        read, [], catalog=run, inductor_configs={}, export_options={}, tolerance_hook=None
    )
    assert layered.options.of(LevelOptions).probe_level == 3
    call = resolve.call_defaults(layered, {"probe_level": 4, "random": None})
    assert call.options.of(LevelOptions).probe_level == 4
    assert call.options.random == "fail"  # not given: the command line's, here the default
    with pytest.raises(AotiUsageError, match="^probe_level must be a positive int, got 0$"):
        resolve.checked({"probe_level": 0}, marker=False, catalog=run)


def test_without_the_field_the_name_is_unknown(run: Catalog) -> None:
    assert "probe_level" not in run.marker_help()
    with pytest.raises(AttributeError):
        CheckDefaults(catalog=run).probe_level  # type: ignore[attr-defined]  # noqa: B018
    # an option is read from the options object, typed, never as an attribute of the defaults
    assert not hasattr(CheckDefaults(catalog=run), "examples")
    with pytest.raises(AotiUsageError, match="unknown option.s. probe_level"):
        resolve.checked({"probe_level": 4}, marker=False, catalog=run)
    with pytest.raises(AotiUsageError, match="@pytest.mark.aoti got unknown option.s. probe_level"):
        resolve.checked({"probe_level": 4}, marker=True, catalog=run)


def test_each_place_lists_the_keywords_of_its_signature(run: Catalog) -> None:
    """The keywords a message lists are the ones the tester's signatures and the run's
    resolver take: a new parameter cannot be left out of the list."""
    import inspect

    from pytest_aoti.options.catalog import CALL_ARGUMENTS
    from pytest_aoti.tester import AotiTester

    def named(method: object) -> tuple[str, ...]:
        parameters = inspect.signature(method).parameters.values()  # type: ignore[arg-type]
        return tuple(
            p.name
            for p in parameters
            if p.name not in ("self", "module", "args") and p.kind is not p.VAR_KEYWORD
        )

    assert keywords.CHECK.call == named(AotiTester.check) == ("kwargs", *CALL_ARGUMENTS)
    assert keywords.COMPILE.call == named(AotiTester.compile)
    assert keywords.MARKER.accepted(run) == run.marker_options()
    assert keywords.CHECK.accepted(run) == (*keywords.CHECK.call, *run.keyword_options())


@pytest.mark.parametrize(
    ("place", "given", "hint"),
    [
        (keywords.CHECK, "mutate", " Did you mean mutates?"),
        (keywords.CHECK, "mutated_buffer", " Did you mean mutated_buffers?"),
        (keywords.CHECK, "crash_screan", " Did you mean crash_screen?"),
        (keywords.MARKER, "values_draw", " Did you mean values_draws or values?"),
        (keywords.MARKER, "rtoll", " Did you mean rtol?"),
        (keywords.COMPILE, "dynamic_shape", " Did you mean dynamic_shapes?"),
        (
            keywords.MARKER,
            "threads",
            " threads is a keyword of aoti.check(), not of @pytest.mark.aoti.",
        ),
        (keywords.CHECK, "zzz", ""),
    ],
)
def test_an_unknown_keyword_names_the_closest_and_every_accepted_one(
    place: keywords.Place, given: str, hint: str, run: Catalog
) -> None:
    with pytest.raises(AotiUsageError) as raised:
        keywords.refuse_unknown(place, [given], run)
    assert str(raised.value) == (
        f"{place.title} got unknown option(s) {given}; "
        f"allowed: {', '.join(place.accepted(run))}.{hint}"
    )
    keywords.refuse_unknown(place, [], run)  # nothing unknown: nothing raised


def test_several_unknown_keywords_each_get_their_hint(run: Catalog) -> None:
    with pytest.raises(AotiUsageError, match=r"Did you mean mutates for mutate, rtol for rtoll\?$"):
        resolve.checked({"rtoll": 1.0, "zzz": 1, "mutate": {}}, marker=False, catalog=run)
    with pytest.raises(AotiUsageError, match="got unknown option.s. mutate, rtoll, zzz; allowed: "):
        resolve.checked({"rtoll": 1.0, "zzz": 1, "mutate": {}}, marker=False, catalog=run)


def test_a_new_field_is_a_keyword_the_hint_offers(probe: ProbeCheck) -> None:
    with pytest.raises(AotiUsageError, match=r"probe_level\. Did you mean probe_level\?$"):
        resolve.checked({"probe_levle": 2}, marker=True, catalog=probe.catalog)
    assert keywords.CHECK.accepted(probe.catalog)[-1] == "probe_level"


def test_rows_and_settings_agree(run: Catalog) -> None:
    """Every core session row is an ``AotiSettings`` field, every feature's a field of its
    settings class; every per-check row is a field of ``CoreOptions`` or of a feature's
    options class; every marker or call keyword has a value check; keywords are unique."""
    from pytest_aoti.options.check_options import CoreOptions

    settings_fields = set(AotiSettings.__dataclass_fields__) | {
        item.name for f in run.features if f.settings for item in fields(f.settings)
    }
    option_names = {item.name for item in fields(CoreOptions)} | {
        item.name for f in run.features if f.options for item in fields(f.options)
    }
    for option in run.rows():
        if option.per_check:
            assert option.keyword_name in option_names, option.name
        elif option.parse is not None:
            assert option.attribute in settings_fields, option.name
        if option.parse is None:
            assert option.marker or option.keyword, option.name
        if option.marker or option.keyword:
            assert option.check is not None, option.name
    names = [option.keyword_name for option in run.rows() if option.marker or option.keyword]
    assert len(names) == len(set(names))
    # the marker's help line: the core options, then each feature plugin's in plugin order
    assert run.marker_help().startswith(
        "aoti(rtol=None, atol=None, strict=None, inductor_configs=None, random=None, "
        "crash_screen=None, budget=None, layouts=None, examples=None, max_dim=None, values=None, "
        "values_draws=None, values_skip=None, precision=None, probes=None, probes_skip=None, "
        "weights=None, cpp_loader=None, localize=None): "
    )


def test_one_vocabulary_parses_and_checks_the_probe_policy(run: Catalog) -> None:
    from pytest_aoti.probes.feature import PROBE_POLICIES

    assert PROBE_POLICIES.parse(" Fail ") == "fail"
    assert resolve.checked({"probes": "FAIL"}, marker=True, catalog=run) == {"probes": "fail"}
    with pytest.raises(argparse.ArgumentTypeError, match="off, report, fail"):
        PROBE_POLICIES.parse("loud")
    with pytest.raises(AotiUsageError, match="^@pytest.mark.aoti: probes must be one of off"):
        resolve.checked({"probes": "loud"}, marker=True, catalog=run)


LEVEL_PLUGIN = """
import argparse
from dataclasses import dataclass

import pytest
from pytest_aoti.api import Feature, Outcome, ValueKind, per_check


def _probe_level(text):
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _check_level(name, value):
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise ValueKind.Problem(f"{name} must be a positive int, got {value!r}")


@dataclass(frozen=True)
class LevelOptions:
    probe_level: int = per_check(
        1, "Probe level of every AOTI check. Default: 1.", parse=_probe_level,
        check=_check_level, marker=True, keyword=True,
    )


LEVEL = Feature("level", "Probe levels", options=LevelOptions)


class ProbeCheck:
    name, phase = "probe", "engine"
    seen = []

    def applies(self, plan, context):
        return True

    def run(self, plan, context):
        level = plan.options.of(LevelOptions).probe_level
        ProbeCheck.seen.append(level)
        return Outcome(figures={"probe_level": level})


def pytest_aoti_feature():
    return LEVEL


def pytest_addoption(parser):
    LEVEL.add_options(parser)


def pytest_aoti_checks(config):
    return [ProbeCheck()]
"""
"""A plugin of its own (the conftest of the inner session): a feature with one option and
the check that reads it, through ``pytest_aoti.api`` alone."""


PROBE_TESTS = """
def test_command_line_value(aoti):
    result = aoti.check(DoubleThenCos(), (example(),))
    assert result.figures["probe_level"] == 3
    # the checks that applied, in the catalog's order; timing's figures are on the result
    assert result.checks == (
        "crash_screen",
        "parity",
        "aliasing",
        "values",
        "probes",
        "cpp_loader",  # no weights to swap
        "timing",
        "probe",
        "precision",
    )
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


@pytest.mark.compiles
def test_a_field_drives_flag_marker_keyword_and_plan(run_aoti, pytester: pytest.Pytester) -> None:
    pytester.makeconftest(LEVEL_PLUGIN)
    result = run_aoti(PROBE_TESTS, "--aoti-probe-level=3")
    result.assert_outcomes(passed=6, errors=1)
    result.stdout.fnmatch_lines(
        ["E * @pytest.mark.aoti: probe_level must be a positive int, got 'high'"]
    )

    markers = pytester.runpytest("--markers")
    markers.stdout.fnmatch_lines(["@pytest.mark.aoti(rtol=None, *, probe_level=None): *"])
    helped = pytester.runpytest("--help")
    helped.stdout.fnmatch_lines(["*--aoti-probe-level=PROBE_LEVEL*", "*aoti_probe_level*"])


@pytest.mark.compiles
def test_a_field_reads_its_ini_key(run_aoti, pytester: pytest.Pytester) -> None:
    pytester.makeconftest(LEVEL_PLUGIN)
    pytester.makeini("[pytest]\naoti_probe_level = 4\n")
    result = run_aoti(
        """
        def test_ini_value(aoti):
            assert aoti.check(DoubleThenCos(), (example(),)).figures["probe_level"] == 4
        """
    )
    result.assert_outcomes(passed=1)


def test_the_checks_come_by_phase_the_core_s_then_the_plugins_with_timing_last(
    run: Catalog,
) -> None:
    from pytest_aoti.plugins import default_checks

    checks = [*catalog.CHECKS, *default_checks().in_order()]
    phases = [check.phase for check in catalog.CHECKS]
    assert phases == sorted(phases, key=PHASES.index)  # listed in the order they run
    names = [check.name for check in checks if check.phase == "engine"]
    assert [check.name for check in checks if check.phase != "engine"] == [
        "eager",  # before anything is compiled
        "not random",  # once exported, before the compile
    ]
    assert names == [
        "signature",
        "crash_screen",
        "random",
        "parity",
        "steps",  # with steps= only
        "aliasing",
        "memory",  # the default plugins' checks, in the plugins' order
        "threads",
        "generated",
        "values",
        "probes",
        "weights",
        "cpp_loader",
        "timing",
        "precision",  # trylast: it judges what every check before it compared
        "golden",  # trylast too, and registered later: only a passing check is recorded
    ]
    engine = [check for check in checks if check.phase == "engine"]
    options = run.check_options({"threads": 1, "max_extra_bytes": None, "examples": 20})
    plan = CheckPlan(module=None, input_sets=(), tolerance=None, calls=1, options=options)
    context = CheckContext(device=torch.device("cpu"))
    applying = [check.name for check in engine if check.applies(plan, context)]
    # no declaration, one thread, no memory limit, no dynamic dims; probes by default
    assert applying == [
        "crash_screen",
        "parity",
        "aliasing",
        "values",
        "probes",
        "weights",
        "cpp_loader",
        "timing",
    ]
    assert [check.name for check in checks if check.applies(plan, context)] == [
        "eager",
        *applying,
    ]
    plan = replace(
        plan,
        options=options.with_values({"threads": 4, "max_extra_bytes": 0}),
        mutates={},
        dynamic_shapes={"x": {0: "batch"}},
        steps=3,
        next_inputs=lambda outputs, args, kwargs: (args, kwargs),
    )
    # the random check applies only to a program that draws random numbers, the precision
    # check once the checks before it compared leaves, the golden check with --aoti-golden
    assert [check.name for check in engine if check.applies(plan, context)] == [
        name for name in names if name not in ("random", "precision", "golden")
    ]
    # and then no check that compares values does; it fails before its compile unless
    # random="shapes" asks for what can be compared
    context.random_ops = (RandomOp(op="aten.bernoulli.p", node="bernoulli"),)
    assert [check.name for check in checks if check.applies(plan, context)] == [
        "eager",
        "not random",
        "signature",
        "crash_screen",  # a random program's engine may crash too
        "random",
        "memory",
        "timing",
    ]
    plan = replace(plan, options=replace(plan.options, random="shapes"))
    assert "not random" not in [check.name for check in checks if check.applies(plan, context)]


def test_the_catalog_orders_the_core_options_then_each_feature_s(run: Catalog) -> None:
    """The run's options: the core per-check rows, then each feature plugin's in the
    default plugins' order; a feature's options and settings are objects of their own."""
    from pytest_aoti.options.check_options import CoreOptions
    from pytest_aoti.options.fields import per_check_fields
    from pytest_aoti.plugins import DEFAULT_PLUGINS

    assert [f.plugin_name for f in run.features] == [
        name for name in DEFAULT_PLUGINS if name in {f.plugin_name for f in run.features}
    ]
    owners = [CoreOptions, *(f.options for f in run.features if f.options)]
    expected = [item.name for owner in owners for item in per_check_fields(owner)]
    assert [row.keyword_name for row in run.rows() if row.per_check] == expected
    options = run.check_options({})
    assert set(options.features) == {f.options for f in run.features if f.options}
    assert set(options.as_dict()) == set(expected)
