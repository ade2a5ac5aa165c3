"""The deployment probes' hooks: their check and their section of the terminal summary."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_aoti.checks.base import Check
    from pytest_aoti.reports.records import CheckRecord


def pytest_aoti_checks() -> list[Check]:
    from pytest_aoti.probes.check import ProbesCheck

    return [ProbesCheck()]


def pytest_aoti_terminal_summary(
    terminalreporter: Any, config: pytest.Config, records: Sequence[CheckRecord]
) -> None:
    """The deployment hazards the probes found, grouped by remedy."""
    from pytest_aoti.probes.hazards import write_hazards
    from pytest_aoti.session import session_of

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
        view="all" if config.get_verbosity() > 0 else settings.hazards,
        serving_checks=settings.checks.serving_checks,
        memory=session.stores.cache_root() if probed else None,  # beside the packages
    )
