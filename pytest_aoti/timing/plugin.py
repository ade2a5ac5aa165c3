"""The timing plugin (``aoti-timing``): how fast the engine runs next to eager, measured on
a program that passed every other check of the plugin's."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_aoti.api import Check


@pytest.hookimpl(tryfirst=True)
def pytest_aoti_checks(config: pytest.Config) -> list[Check]:
    from pytest_aoti.timing.check import TimingCheck  # imports torch

    return [TimingCheck()]
