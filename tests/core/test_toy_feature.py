"""A new feature is an outside plugin on ``pytest_aoti.api``, nothing else.

The toy plugin (a module of its own, loaded with ``-p toy_plugin``, importing
``pytest_aoti.api`` alone) declares one option, one check, one record field with its JUnit
property and one summary line. The session run on it shows all five: the option in
``--help``, its ini key and its marker keyword; the check inside ``aoti.check``; the field in
every JSON record; the property in the JUnit XML; the line in the terminal summary. The
toy's check fails in the eager phase above its level, so one test compiles nothing.
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
    Feature,
    Outcome,
    RecordPart,
    add_options,
    check_count,
    parse_positive_int,
    per_check,
)


@dataclass(frozen=True)
class ToyOptions:
    toy_level: int = per_check(
        1,
        "The toy feature's level. Default: 1.",
        parse=parse_positive_int,
        check=check_count,
        marker=True,
    )


def toy_properties(fields):
    return [("aoti_toy_seen", fields["toy_seen"])] if fields.get("toy_seen") else []


TOY = Feature(
    "toy",
    "A toy: fails a check whose level is over 2",
    options=ToyOptions,
    record_fields={"toy_seen": 0},
    properties=toy_properties,
)


class ToyCheck:
    name, phase = "toy", "eager"

    def applies(self, plan, context):
        return True

    def run(self, plan, context):
        level = plan.options.of(ToyOptions).toy_level
        if level > 2:
            raise AotiCheckError(f"toy level {level} is over 2")
        return Outcome(record=RecordPart({"toy_seen": level}))


def pytest_aoti_feature():
    return TOY


def pytest_addoption(parser):
    add_options(parser, TOY)


def pytest_aoti_checks(config):
    return [ToyCheck()]


def pytest_aoti_terminal_summary(terminalreporter, config, records):
    seen = sum(1 for record in records if record.other_fields.get("toy_seen"))
    terminalreporter.write_line(f"toy: {seen} check(s) seen")
"""

TOY_TESTS = """
import pytest
import torch


def test_default(aoti):
    aoti.check(torch.nn.Linear(2, 2), (torch.randn(3, 2),), probes="off", values="off")


@pytest.mark.aoti(toy_level=3)
def test_over(aoti):
    aoti.check(torch.nn.Linear(2, 2), (torch.randn(3, 2),))
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
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["E * toy level 3 is over 2", "toy: 1 check(s) seen"])
    records = {r["test"].split("::")[-1]: r for r in json.loads(report.read_text())["checks"]}
    assert records["test_default[cpu]"]["toy_seen"] == 2
    properties = {p.get("name"): p.get("value") for p in ET.parse(junit).getroot().iter("property")}
    assert properties["aoti_toy_seen"] == "2"


def test_the_toy_plugin_imports_the_api_alone() -> None:
    imported = {
        node.module
        for node in ast.walk(ast.parse(TOY_PLUGIN))
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert {name for name in imported if name.startswith("pytest_aoti")} == {"pytest_aoti.api"}
