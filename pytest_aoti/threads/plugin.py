"""The threads plugin (``aoti-threads``): one engine shared by the threads of a server,
each thread's results against eager; a program whose registered buffers it mutates is not
thread-safe."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_aoti.threads.feature import THREADS

if TYPE_CHECKING:
    from pytest_aoti.api import Check, Feature


@pytest.hookimpl(tryfirst=True)
def pytest_aoti_checks(config: pytest.Config) -> list[Check]:
    from pytest_aoti.threads.check import ThreadsCheck  # torch loads on first use

    return [ThreadsCheck()]


@pytest.hookimpl  # also read outside a run, by a plain plugin manager
def pytest_aoti_feature() -> Feature:
    return THREADS


def pytest_addoption(parser: pytest.Parser) -> None:
    THREADS.add_options(parser)
