"""The model specs' hooks: ``--aoti-models-list`` and the tests of ``--aoti-model``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_aoti.api import session_of
from pytest_aoti.models.collect import list_main, register
from pytest_aoti.models.feature import MODELS, ModelSettings

if TYPE_CHECKING:
    from pytest_aoti.api import Feature


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """``--aoti-models-list``: print the model specs and exit, as ``--fixtures`` does."""
    if not config.getoption("aoti_models_list"):
        return None

    return list_main(config)


@pytest.hookimpl(trylast=True)  # after the plugin's own configure: the session's settings
def pytest_configure(config: pytest.Config) -> None:
    settings = session_of(config).settings.of(ModelSettings)
    if settings.models or settings.models_list:
        register(config, settings.models)  # the specs resolve now, or a usage error


@pytest.hookimpl  # also read outside a run, by a plain plugin manager
def pytest_aoti_feature() -> Feature:
    return MODELS


def pytest_addoption(parser: pytest.Parser) -> None:
    MODELS.add_options(parser)
