"""The golden plugin (``aoti-golden``): each passing check recorded (``--aoti-golden-update``)
or compared with its record (``--aoti-golden=DIR``); one summary line; the records of tests
that no longer exist listed, and deleted on an update that collected every test."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_aoti.api import session_of
from pytest_aoti.golden.feature import GOLDEN, UPDATE_FLAG, GoldenSettings

if TYPE_CHECKING:
    from pytest_aoti.api import Check, CheckRecord, Feature

_REPORTED: pytest.StashKey[ReportedTests] = pytest.StashKey()
"""Test id -> its outcome, of every test this run reported (xdist's workers' too)."""


@pytest.hookimpl(trylast=True)  # after every other check: only a passing check is recorded
def pytest_aoti_checks(config: pytest.Config) -> list[Check]:
    from pytest_aoti.golden.check import GoldenCheck  # imports torch

    return [GoldenCheck()]


@pytest.hookimpl  # also read outside a run, by a plain plugin manager
def pytest_aoti_feature() -> Feature:
    return GOLDEN


def pytest_addoption(parser: pytest.Parser) -> None:
    GOLDEN.add_options(parser)


def pytest_aoti_model_prefixes(config: pytest.Config) -> dict[str, Any]:
    """``--aoti-model=golden:DIR``: each record's package tested alone, no model code."""
    from pytest_aoti.golden.spec import spec_prefixes

    return spec_prefixes(config)


class ReportedTests:
    """Test id -> its outcome, of every test this run reported (xdist's workers' too): a
    failure in any phase fails it."""

    def __init__(self) -> None:
        self.by_test: dict[str, str] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.by_test[report.nodeid] = "failed"
        elif self.by_test.get(report.nodeid) != "failed" and (
            report.when == "call" or report.nodeid not in self.by_test
        ):
            self.by_test[report.nodeid] = report.outcome


def pytest_configure(config: pytest.Config) -> None:
    if session_of(config).settings.of(GoldenSettings).golden:
        outcomes = ReportedTests()
        config.stash[_REPORTED] = outcomes
        config.pluginmanager.register(outcomes, "aoti-golden-outcomes")


def pytest_aoti_terminal_summary(
    terminalreporter: Any, config: pytest.Config, records: Sequence[CheckRecord]
) -> None:
    settings = session_of(config).settings.of(GoldenSettings)
    if not settings.golden:
        return
    from pytest_aoti.golden.lines import summary_line, unused_lines

    root = Path(settings.golden)
    fields = [record.other_fields.get("golden") for record in records]
    findings = [record.finding for record in records]
    terminalreporter.write_line(summary_line(fields, findings, update=settings.golden_update))
    if not _collected_everything(terminalreporter, config):
        return
    from pytest_aoti.golden.records import unused_records

    checked = {str(field["label"]) for field in fields if isinstance(field, dict)}
    unused = unused_records(root, _outcomes(config), checked)
    if not unused:
        return
    if settings.golden_update:
        for record in unused:
            shutil.rmtree(record.folder, ignore_errors=True)
    for line in unused_lines(unused, deleted=settings.golden_update, flag=UPDATE_FLAG):
        terminalreporter.write_line(line)


def _collected_everything(terminalreporter: Any, config: pytest.Config) -> bool:
    """Whether this run collected and reported every test of the suite: no path, ``-k``,
    ``-m``, ``--lf`` or deselection narrowed it, and no stop cut it short (only then does a
    record without its test belong to a test that no longer exists)."""
    option = config.option
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        return False
    if getattr(option, "keyword", "") or getattr(option, "markexpr", ""):
        return False
    if getattr(option, "lf", False) or getattr(option, "deselect", None):
        return False
    stats = terminalreporter.stats
    if stats.get("deselected") or stats.get("error"):
        return False
    session = getattr(terminalreporter, "_session", None)
    if session is None or session.shouldstop or session.shouldfail:
        return False
    reported = _outcomes(config)
    return bool(reported) and len(reported) == session.testscollected


def _outcomes(config: pytest.Config) -> dict[str, str]:
    outcomes = config.stash.get(_REPORTED, None)
    return outcomes.by_test if outcomes is not None else {}
