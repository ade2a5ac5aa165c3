"""The generated shapes' hooks: their check, and Hypothesis's summary left out of runs
that drew nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_aoti.generated.feature import GENERATED
from pytest_aoti.generated.idle_hypothesis import leave_out_idle_summary

if TYPE_CHECKING:
    from pytest_aoti.api import Check, Feature


@pytest.hookimpl(tryfirst=True)
def pytest_aoti_checks(config: pytest.Config) -> list[Check]:
    from pytest_aoti.generated.check import GeneratedCheck  # imports torch and Hypothesis

    return [GeneratedCheck()]


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    # before the terminal summary, which pytest's reporter runs after every sessionfinish
    leave_out_idle_summary(session.config)


@pytest.hookimpl  # also read outside a run, by a plain plugin manager
def pytest_aoti_feature() -> Feature:
    return GENERATED


def pytest_addoption(parser: pytest.Parser) -> None:
    GENERATED.add_options(parser)
