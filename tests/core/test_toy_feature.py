"""A new feature is an outside plugin on ``pytest_aoti.api``, nothing else.

The toy plugin (a module of its own, loaded with ``-p toy_plugin``, importing
``pytest_aoti.api`` alone) declares one option, two checks, one record field with its JUnit
property, one summary line and a kind of failure of its own with its repro-bundle adapter.
The session run on it shows them all: the option in ``--help``, its ini key and its marker
keyword; the checks inside ``aoti.check``; the field in every JSON record; the property in
the JUnit XML; the line in the terminal summary; the toy's kind in the JSON report and its
own file in the failure's repro bundle. The toy's first check fails in the eager phase at
level 3, so that test compiles nothing; the other tests share one program.
"""

from __future__ import annotations

import ast
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

TOY_PLUGIN = """
from dataclasses import dataclass

import pytest

from pytest_aoti.api import (
    AotiCheckError,
    BundleAdapter,
    Feature,
    Finding,
    FindingKind,
    Outcome,
    RecordPart,
    ValueKind,
    per_check,
)


@dataclass(frozen=True)
class ToyOptions:
    toy_level: int = per_check(
        1,
        "The toy feature's level. Default: 1.",
        kind=ValueKind.COUNT,
        marker=True,
    )


def toy_properties(fields):
    return [("aoti_toy_seen", fields["toy_seen"])] if fields.get("toy_seen") else []


TOY_KIND = FindingKind("toy")


def toy_target(finding):
    # what the bundle's repro.py reproduces: the output the toy names
    return {"kind": "output", "location": finding["location"]}


def toy_files(finding, directory):
    (directory / "toy.txt").write_text(f"toy level {finding['extra']['level']}\\n")


TOY = Feature(
    "toy",
    "A toy: fails a check at level 3, and with a toy failure from level 4",
    options=ToyOptions,
    record_fields={"toy_seen": 0},
    properties=toy_properties,
    kinds={TOY_KIND: "the toy's level is 4 or more"},
    bundle=BundleAdapter(toy_target, toy_files),
)


class ToyCheck:
    name, phase = "toy", "eager"

    def applies(self, plan, context):
        return True

    def run(self, plan, context):
        level = plan.options.of(ToyOptions).toy_level
        if level == 3:
            raise AotiCheckError(f"toy level {level} is over 2")
        return Outcome(record=RecordPart({"toy_seen": level}))


class ToyKindCheck:
    name, phase = "toykind", "engine"

    def applies(self, plan, context):
        return plan.options.of(ToyOptions).toy_level >= 4

    def run(self, plan, context):
        from pytest_aoti.api import InputReplay

        level = plan.options.of(ToyOptions).toy_level
        finding = Finding(
            kind=TOY_KIND,
            location="output",
            summary="",
            message=f"toy level {level}: a toy failure",
            extra={"level": level},
        )
        error = AotiCheckError(finding)
        args, kwargs = plan.input_sets[0]
        error.replay = InputReplay(plan.module, tuple(args), dict(kwargs), calls=1)
        raise error


def pytest_aoti_feature():
    return TOY


def pytest_addoption(parser):
    TOY.add_options(parser)


def pytest_aoti_checks(config):
    return [ToyCheck(), ToyKindCheck()]


def pytest_aoti_terminal_summary(terminalreporter, config, records):
    seen = sum(1 for record in records if record.other_fields.get("toy_seen"))
    terminalreporter.write_line(f"toy: {seen} check(s) seen")
"""

TOY_TESTS = """
import pytest
import torch


def linear():
    torch.manual_seed(0)  # one program for the tests that compile
    return torch.nn.Linear(2, 2), (torch.randn(3, 2),)


def test_default(aoti):
    aoti.check(*linear(), probes="off", values="off")


@pytest.mark.aoti(toy_level=3)
def test_over(aoti):
    aoti.check(*linear())


@pytest.mark.aoti(toy_level=4)
def test_toy_kind(aoti):
    aoti.check(*linear(), probes="off", values="off")
"""


@pytest.mark.compiles
def test_an_outside_plugin_adds_an_option_a_check_a_record_field_and_a_summary_line(
    pytester: pytest.Pytester, shared_cache_dir: Path
) -> None:
    pytester.makepyfile(toy_plugin=TOY_PLUGIN, test_toy=TOY_TESTS)
    pytester.syspathinsert()
    report, junit = pytester.path / "aoti.json", pytester.path / "junit.xml"
    helped = pytester.runpytest("-p", "toy_plugin", "--help")
    helped.stdout.fnmatch_lines(["*--aoti-toy-level=TOY_LEVEL*", "*aoti_toy_level*"])
    result = pytester.runpytest(
        "-p",
        "toy_plugin",
        "--aoti-device=cpu",
        f"--aoti-cache-dir={shared_cache_dir}",
        f"--aoti-report={report}",
        f"--junitxml={junit}",
        "--aoti-toy-level=2",
        "--aoti-keep-failed=failed",
    )
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        ["E * toy level 3 is over 2", "E * toy level 4: a toy failure", "toy: 1 check(s) seen"]
    )
    records = {r["test"].split("::")[-1]: r for r in json.loads(report.read_text())["checks"]}
    assert records["test_default[cpu]"]["toy_seen"] == 2
    # the toy's own kind of failure: in the report, and its bundle holds the toy's own file
    # and reproduces what the toy's adapter names
    assert records["test_toy_kind[cpu]"]["finding"]["kind"] == "toy"
    [bundle] = (pytester.path / "failed").iterdir()
    assert (bundle / "toy.txt").read_text() == "toy level 4\n"
    check = json.loads((bundle / "check.json").read_text())
    assert check["reproduces"] == {"kind": "output", "location": "output"}
    properties = {p.get("name"): p.get("value") for p in ET.parse(junit).getroot().iter("property")}
    assert properties["aoti_toy_seen"] == "2"


def test_the_toy_plugin_imports_the_api_alone() -> None:
    imported = {
        node.module
        for node in ast.walk(ast.parse(TOY_PLUGIN))
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert {name for name in imported if name.startswith("pytest_aoti")} == {"pytest_aoti.api"}
