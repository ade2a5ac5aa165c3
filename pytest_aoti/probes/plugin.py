"""The deployment probes' hooks: their check and their section of the terminal summary."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pytest

from pytest_aoti.api import session_of
from pytest_aoti.probes import hookspecs
from pytest_aoti.probes.feature import PROBES, ProbeOptions, ProbeSettings
from pytest_aoti.probes.hazards import write_hazards

if TYPE_CHECKING:
    from pytest_aoti.api import Check, CheckRecord, Feature


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(tryfirst=True)
def pytest_aoti_checks(config: pytest.Config) -> list[Check]:
    from pytest_aoti.probes.check import ProbesCheck  # imports torch

    return [ProbesCheck()]


@pytest.hookimpl(tryfirst=True)  # the plugin's own sections before other plugins'
def pytest_aoti_terminal_summary(
    terminalreporter: Any, config: pytest.Config, records: Sequence[CheckRecord]
) -> None:
    """The deployment hazards the probes found, grouped by remedy."""
    session = session_of(config)
    settings = session.settings
    # what the hazards were is kept only where the run may write its cache
    probed = (
        settings.cache_mode == "readwrite"
        and not hasattr(config, "workerinput")
        and any(record.other_fields.get("probes") for record in records)
    )
    write_hazards(
        terminalreporter,
        records,
        view="all" if config.get_verbosity() > 0 else settings.of(ProbeSettings).hazards,
        serving_checks=settings.checks.of(ProbeOptions).serving_checks,
        memory=session.stores.cache_root() if probed else None,  # beside the packages
    )


@pytest.hookimpl  # also read outside a run, by a plain plugin manager
def pytest_aoti_feature() -> Feature:
    return PROBES


def pytest_addoption(parser: pytest.Parser) -> None:
    PROBES.add_options(parser)
