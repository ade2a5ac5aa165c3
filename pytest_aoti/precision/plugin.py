"""The precision plugin (``aoti-precision``): where the float64 reference sides with the
engine against eager, said in the record and the summary, or failed."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_aoti.precision.check import PrecisionCheck
from pytest_aoti.precision.feature import PRECISION

if TYPE_CHECKING:
    from pytest_aoti.api import Check, Feature


@pytest.hookimpl(trylast=True)  # after every other check: it judges what they compared
def pytest_aoti_checks(config: pytest.Config) -> list[Check]:
    return [PrecisionCheck()]


@pytest.hookimpl  # also read outside a run, by a plain plugin manager
def pytest_aoti_feature() -> Feature:
    return PRECISION


def pytest_addoption(parser: pytest.Parser) -> None:
    PRECISION.add_options(parser)
