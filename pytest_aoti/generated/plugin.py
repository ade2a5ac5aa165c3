"""The generated shapes' hooks: their check, and Hypothesis's summary left out of runs
that drew nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_aoti.checks.base import Check


def pytest_aoti_checks() -> list[Check]:
    from pytest_aoti.generated.check import GeneratedCheck

    return [GeneratedCheck()]


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    # before the terminal summary, which pytest's reporter runs after every sessionfinish
    from pytest_aoti.generated.idle_hypothesis import leave_out_idle_summary

    leave_out_idle_summary(session.config)
