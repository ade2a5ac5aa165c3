"""The deployment-hazards section grouped by remedy, the declared serving mode, and warm
runs that stay quiet.

One suite of five tiny programs (four elementwise ops and one that mutates an input it
may be called with aliased) compiles once, in a test of its own cache directory; four
pytest sessions then read it: cold under ``-n 2``, ``-v``, serving checks declared with
``--aoti-probes=fail``, and a plain warm rerun. The rest is pure logic on records.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pytest_aoti.probes import last_hazards, outcomes
from pytest_aoti.probes.feature import ProbeOptions, ProbeSettings
from pytest_aoti.probes.hazards import hazard_lines
from pytest_aoti.reports.records import CheckRecord

SUITE = textwrap.dedent(
    """
    import pytest
    import torch

    OPS = {
        "sin": lambda x: x.sin() * 2,
        "exp": lambda x: x.exp(),
        "relu": lambda x: x.relu(),
        "add": lambda x: x + 1,
    }


    class Op(torch.nn.Module):
        def __init__(self, name):
            super().__init__()
            self.name = name

        def forward(self, x):
            return OPS[self.name](x)


    class MulAdd(torch.nn.Module):
        def forward(self, x, y):
            x.mul_(2)
            return x + y


    @pytest.mark.parametrize("name", sorted(OPS))
    def test_elementwise(aoti, name):
        aoti.check(Op(name), (torch.randn(2, 3),))


    def test_alias(aoti):
        aoti.check(MulAdd(), (torch.rand(5) + 1, torch.rand(5) + 1))
    """
)


def hazards_section(lines: list[str]) -> list[str]:
    """The lines of the terminal's hazards section, without its title ([] without one)."""
    starts = [i for i, line in enumerate(lines) if "aoti: deployment hazards" in line]
    if not starts:
        return []
    section = []
    for line in lines[starts[0] + 1 :]:
        if line.startswith(("---", "===", "aoti: ")):
            break
        section.append(line)
    return section


@pytest.mark.compiles
def test_hazards_grouped_by_remedy_serving_mode_and_warm_runs(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile(test_ops=SUITE)
    cache = tmp_path / "cache"
    common = ("--aoti-device=cpu", f"--aoti-cache-dir={cache}", "-p", "no:cacheprovider")
    report = tmp_path / "cold.json"

    # cold, on two workers: the controller prints what the workers' payloads carry
    cold = pytester.runpytest(*common, "-n", "2", f"--aoti-report={report}")
    cold.assert_outcomes(passed=5)
    section = hazards_section(cold.stdout.lines)
    assert 3 <= len(section) + 1 <= 8, section  # the title counts
    text = "\n".join(section)
    assert section[0].startswith("AOTI_RUNTIME_CHECK_INPUTS=1 refuses "), section
    assert " of 4 program(s) " in section[0] or " of 5 program(s) " in section[0], section
    assert "test_elementwise" not in text, "the input checks' paragraph names no test"
    assert "test_ops.py::test_alias[cpu]: " in text
    assert "wrong: input 'x, y' same tensor: max abs error" in text

    # the JSON keeps every variant, each with its group
    checks = json.loads(report.read_text())["checks"]
    assert len(checks) == 5
    variants = {}
    for check in checks:
        assert check["probes"], check["test"]
        assert check["probes_cached"] is False
        for probe in check["probes"]:
            assert probe["group"] == outcomes.hazard_group(
                probe["outcome"], probe["refused_with_checks"]
            )
        variants[check["test"]] = [(p["input"], p["variant"]) for p in check["probes"]]
    alias = next(check for check in checks if "test_alias" in check["test"])
    assert {p["group"] for p in alias["probes"] if p["kind"] == "aliased"} == {"silent"}

    # a warm rerun: nothing changed, one line
    warm = pytester.runpytest(*common, "-p", "no:xdist")
    warm.assert_outcomes(passed=5)
    assert hazards_section(warm.stdout.lines) == [
        "5 program(s) keep the hazards of the last run: -v lists them"
    ]

    # -v lists every variant of every program
    verbose = pytester.runpytest(*common, "-p", "no:xdist", "-v")
    verbose.assert_outcomes(passed=5)
    listed = "\n".join(hazards_section(verbose.stdout.lines))
    for test, names in variants.items():
        block = listed.split(f"{test} (program ")[1].split("(program ")[0]
        for name, variant in names:
            shown = f"input '{name}' {variant}:" in block or f"{name} {variant} " in block
            assert shown, (test, name, variant, block)
    assert "keep the hazards of the last run" not in listed
    # the 4 elementwise programs share their remedies: each is said once
    remedies = [line for line in listed.splitlines() if line.strip().startswith("remedy:")]
    assert remedies and len(remedies) == len(set(remedies)), remedies

    # serving checks declared: what the checked engine refuses fails nothing
    serving = pytester.runpytest(
        *common,
        "-p",
        "no:xdist",
        "-o",
        "aoti_serving_checks=true",
        "--aoti-probes=fail",
        "--aoti-localize=off",
    )
    serving.assert_outcomes(passed=4, failed=1)
    serving.stdout.fnmatch_lines(
        [
            "E *AotiCheckError: the AOTI compile broke it: deployment probe: *",
            "E *input 'x, y' same tensor: *; with AOTI_RUNTIME_CHECK_INPUTS=1 the engine runs it too",
        ]
    )
    serving.stdout.fnmatch_lines(["FAILED test_ops.py::test_alias[[]cpu[]]*"])
    serving.stdout.fnmatch_lines(
        [
            "AOTI_RUNTIME_CHECK_INPUTS=1, declared set by the serving process, refuses *: "
            "not hazards",
            "test_ops.py::test_alias[[]cpu[]]: 2 hazard(s) input checks do not catch",
        ]
    )


def test_the_view_and_serving_options_are_validated_and_read(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    bad = pytester.runpytest("--aoti-hazards=loud")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*expected one of summary, all, got 'loud'*"])
    bad_ini = pytester.runpytest("-o", "aoti_serving_checks=sometimes")
    assert bad_ini.ret == pytest.ExitCode.USAGE_ERROR
    bad_ini.stderr.fnmatch_lines(["*aoti_serving_checks*expected on or off*"])

    from pytest_aoti.options.settings import read_settings
    from pytest_aoti.plugins import default_catalog

    run = default_catalog()

    assert (
        read_settings(pytester.parseconfig(), run).checks.of(ProbeOptions).serving_checks is False
    )
    assert (
        read_settings(pytester.parseconfig("--aoti-serving-checks"), run)
        .checks.of(ProbeOptions)
        .serving_checks
        is True
    )
    pytester.makeini("[pytest]\naoti_serving_checks = true\naoti_hazards = all\n")
    settings = read_settings(pytester.parseconfig(), run)
    assert settings.checks.of(ProbeOptions).serving_checks is True
    assert settings.of(ProbeSettings).hazards == "all"


# --- pure logic, no compile ------------------------------------------------------------


def _probe(
    variant: str, kind: str, outcome: str, checks: bool | None, **more: Any
) -> dict[str, Any]:
    return {
        "input": "x",
        "variant": variant,
        "kind": kind,
        "outcome": outcome,
        "max_abs": 5.37,
        "max_rel": 2.0,
        "refused_with_checks": checks,
        "remedy": f"remedy of {kind}" if outcome in ("wrong", "unguarded") else "",
        **more,
    }


def _record(test: str, program: str, *items: dict[str, Any], cached: bool = False) -> CheckRecord:
    record = CheckRecord(
        test=test,
        device="cpu",
        program=program,
        cache_hit=False,
        compile_seconds=0.0,
        original_compile_seconds=0.0,
    )
    record.update({"probes": list(items), "probes_cached": cached})  # as the probes report
    return record


LAYOUT = _probe("channels_last", "channels_last", "wrong", True)
SIZE = _probe("size[0]=3", "size", "unguarded", True)
ALIASED = _probe("same tensor", "aliased", "wrong", False, input="x, y")
SCALAR = _probe("value=3.0", "scalar", "unguarded", False, input="s")
CRASHED = _probe("dtype=float16", "dtype", "wrong", None, max_abs=None, detail="crashed")
FINE = _probe("permuted", "permuted", "ok", True)


def test_summary_groups_what_input_checks_refuse_and_lists_the_rest_per_program() -> None:
    records = [
        _record("t.py::a", "p1" * 10, LAYOUT, SIZE, FINE),
        _record("t.py::b", "p1" * 10, LAYOUT, SIZE),  # same program: counted once
        _record("t.py::c", "p2" * 10, LAYOUT, ALIASED, SCALAR),
        _record("t.py::d", "p3" * 10, FINE),
        _record("t.py::e", "p4" * 10, CRASHED, SIZE),
    ]
    assert hazard_lines(records) == [
        "AOTI_RUNTIME_CHECK_INPUTS=1 refuses 4 variant(s) of 3 program(s) that their "
        "engines run without it, with other results than eager: layouts 2, sizes 2",
        "  remedy: set AOTI_RUNTIME_CHECK_INPUTS=1 in the serving process (then declare it: "
        "--aoti-serving-checks), or call the engine with inputs as exported (contiguous, the "
        "exported sizes, dtypes and devices)",
        "t.py::c: 2 hazard(s) input checks do not catch",
        "  wrong: input 'x, y' same tensor: max abs error 5.37, max rel error 2; also runs "
        "with AOTI_RUNTIME_CHECK_INPUTS=1",
        "    remedy: remedy of aliased",
        "  unguarded: input 's' value=3.0: max abs error 5.37, max rel error 2; also runs "
        "with AOTI_RUNTIME_CHECK_INPUTS=1",
        "    remedy: remedy of scalar",
        "t.py::e: 1 hazard(s) input checks do not catch",
        "  wrong: input 'x' dtype=float16: crashed; unknown whether "
        "AOTI_RUNTIME_CHECK_INPUTS=1 refuses it",
        "    remedy: remedy of dtype",
        "-v or --aoti-hazards=all lists every variant",
    ]
    assert hazard_lines([_record("t.py::d", "p3", FINE)]) == []


def test_declared_serving_checks_turn_the_paragraph_into_a_line() -> None:
    records = [_record("t.py::a", "p1", LAYOUT, SIZE), _record("t.py::c", "p2", ALIASED)]
    lines = hazard_lines(records, serving_checks=True)
    assert lines[0] == (
        "AOTI_RUNTIME_CHECK_INPUTS=1, declared set by the serving process, refuses 2 "
        "variant(s) of 1 program(s) (layouts 1, sizes 1): not hazards"
    )
    assert lines[1] == "t.py::c: 1 hazard(s) input checks do not catch"


def test_every_variant_in_the_all_view() -> None:
    lines = hazard_lines([_record("t.py::a", "p1" * 10, LAYOUT, SIZE, FINE)], view="all")
    assert lines == [
        "t.py::a (program p1p1p1p1p1p1):",
        "  wrong: input 'x' channels_last: max abs error 5.37, max rel error 2; refused with "
        "AOTI_RUNTIME_CHECK_INPUTS=1",
        "    remedy: remedy of channels_last",
        "  unguarded: input 'x' size[0]=3: max abs error 5.37, max rel error 2; refused with "
        "AOTI_RUNTIME_CHECK_INPUTS=1",
        "    remedy: remedy of size",
        "  not hazards: x permuted ok",
    ]


def test_the_all_view_says_each_remedy_once() -> None:
    records = [_record(f"t.py::{name}", name * 6, LAYOUT, SIZE) for name in ("a", "b", "c")]
    lines = hazard_lines(records, view="all")
    assert [line for line in lines if "remedy:" in line] == [
        "    remedy: remedy of channels_last",
        "    remedy: remedy of size",
    ]
    later = (
        "  wrong: input 'x' channels_last: max abs error 5.37, max rel error 2; refused "
        "with AOTI_RUNTIME_CHECK_INPUTS=1 (remedy above)"
    )
    assert lines.count(later) == 2, lines  # programs b and c
    assert lines.count("t.py::c (program cccccc):") == 1


def test_cached_unchanged_programs_collapse_a_new_or_changed_one_shows() -> None:
    same = _record("t.py::a", "p1", LAYOUT, ALIASED, cached=True)
    last = {"p1@cpu": last_hazards.outcomes_digest(same.other_fields["probes"])}
    assert hazard_lines([same], last=last) == [
        "1 program(s) keep the hazards of the last run: -v lists them"
    ]
    assert len(hazard_lines([same], last=last, view="all")) > 1, "-v lists them"
    fresh = _record("t.py::a", "p1", LAYOUT, ALIASED, cached=False)
    assert "t.py::a: 1 hazard(s) input checks do not catch" in hazard_lines([fresh], last=last)
    changed = _record("t.py::a", "p1", LAYOUT, {**ALIASED, "outcome": "ok"}, cached=True)
    assert hazard_lines([changed], last=last)[0].startswith("AOTI_RUNTIME_CHECK_INPUTS=1 ")
    new = _record("t.py::b", "p2", SCALAR, cached=True)
    lines = hazard_lines([same, new], last=last)
    assert lines[0] == "t.py::b: 1 hazard(s) input checks do not catch"
    assert lines[-1] == "1 program(s) keep the hazards of the last run: -v lists them"


def test_what_fails_and_the_groups() -> None:
    assert outcomes.hazard_group("ok", True) == "none"
    assert outcomes.hazard_group("refused", None) == "none"
    assert outcomes.hazard_group("wrong", True) == "input_checks"
    assert outcomes.hazard_group("unguarded", True) == "input_checks"
    assert outcomes.hazard_group("wrong", False) == "silent"
    assert outcomes.hazard_group("wrong", None) == "silent", "unknown stays a hazard"
    assert outcomes.fails("wrong", True, serving_checks=False)
    assert not outcomes.fails("wrong", True, serving_checks=True)
    assert outcomes.fails("wrong", False, serving_checks=True)
    assert outcomes.fails("wrong", None, serving_checks=True)
    assert not outcomes.fails("unguarded", False, serving_checks=False), "a scalar never fails"
    outcome = outcomes.ProbeOutcome("x", "permuted", "wrong", "permuted", 1.0, 1.0, True)
    assert outcome.to_json()["group"] == "input_checks"
    assert outcomes.ProbeOutcome.from_json(outcome.to_json()) == outcome
    report = outcomes.ProbeReport((outcome,))
    assert report.failing() == [outcome] and report.failing(serving_checks=True) == []


def test_the_last_run_is_kept_atomically_and_a_bad_file_reads_as_none(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    assert last_hazards.read_last(root) == {}
    last_hazards.keep(root, {"p1@cpu": "d1"})
    last_hazards.keep(root, {"p2@cpu": "d2"})
    assert last_hazards.read_last(root) == {"p1@cpu": "d1", "p2@cpu": "d2"}
    assert [path.name for path in root.iterdir()] == [last_hazards.FILE_NAME]
    (root / last_hazards.FILE_NAME).write_text("{not json")
    assert last_hazards.read_last(root) == {}
    last_hazards.keep(root, {"p3@cpu": "d3"})
    assert last_hazards.read_last(root) == {"p3@cpu": "d3"}
    assert last_hazards.read_last(None) == {}
