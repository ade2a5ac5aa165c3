"""The swapped weights' hooks: their check and their section of the terminal summary."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pytest

from pytest_aoti.weights.feature import WEIGHTS
from pytest_aoti.weights.hazards import write_weights_hazards

if TYPE_CHECKING:
    from pytest_aoti.api import Check, CheckRecord, Feature


@pytest.hookimpl(tryfirst=True)
def pytest_aoti_checks(config: pytest.Config) -> list[Check]:
    from pytest_aoti.weights.check import WeightsCheck  # imports torch

    return [WeightsCheck()]


@pytest.hookimpl(tryfirst=True)  # the plugin's own section before other plugins'
def pytest_aoti_terminal_summary(
    terminalreporter: Any, config: pytest.Config, records: Sequence[CheckRecord]
) -> None:
    """The weights engines cannot take, where the checks passed (``weights="report"``)."""
    write_weights_hazards(terminalreporter, records)


@pytest.hookimpl  # also read outside a run, by a plain plugin manager
def pytest_aoti_feature() -> Feature:
    return WEIGHTS


def pytest_addoption(parser: pytest.Parser) -> None:
    WEIGHTS.add_options(parser)
