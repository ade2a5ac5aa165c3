"""The generated values' hooks: their check."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_aoti.values.feature import VALUES, ValuesOptions

if TYPE_CHECKING:
    from pytest_aoti.api import Check, CheckPlan, Feature


@pytest.hookimpl(tryfirst=True)
def pytest_aoti_checks(config: pytest.Config) -> list[Check]:
    from pytest_aoti.values.check import ValuesCheck  # imports torch

    return [ValuesCheck()]


@pytest.hookimpl  # also read outside a run, by a plain plugin manager
def pytest_aoti_feature() -> Feature:
    return VALUES


def pytest_addoption(parser: pytest.Parser) -> None:
    VALUES.add_options(parser)


@pytest.hookimpl(optionalhook=True)  # the probes plugin's hook: absent where it is blocked
def pytest_aoti_edge_values(plan: CheckPlan) -> tuple[str, frozenset[str]]:
    """Edge values as deployment probes: reported under ``values="domain"``, failing the
    check under ``"edge"``, none under ``"off"``; ``values_skip`` inputs get none."""
    options = plan.options.of(ValuesOptions)
    mode = {"domain": "report", "edge": "fail"}.get(options.values, "off")
    return mode, frozenset(options.values_skip or ())
