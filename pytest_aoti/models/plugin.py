"""The model specs' hooks: ``--aoti-models-list`` and the tests of ``--aoti-model``."""

from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """``--aoti-models-list``: print the model specs and exit, as ``--fixtures`` does."""
    if not config.getoption("aoti_models_list"):
        return None
    from pytest_aoti.models.collect import list_main

    return list_main(config)


@pytest.hookimpl(trylast=True)  # after the plugin's own configure: the session's settings
def pytest_configure(config: pytest.Config) -> None:
    from pytest_aoti.session import session_of

    settings = session_of(config).settings
    if settings.models or settings.models_list:
        from pytest_aoti.models.collect import register

        register(config, settings.models)  # the specs resolve now, or a usage error
