"""The memory plugin (``aoti-memory``): with ``max_extra_bytes=N``, no engine call of the
example allocates more than N bytes of device memory beyond what was allocated before it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pytest

from pytest_aoti.memory.feature import MEMORY

if TYPE_CHECKING:
    from pytest_aoti.api import Check, CheckRecord, Feature


@pytest.hookimpl(tryfirst=True)
def pytest_aoti_checks(config: pytest.Config) -> list[Check]:
    from pytest_aoti.memory.check import MemoryCheck  # torch loads on first use

    return [MemoryCheck()]


@pytest.hookimpl(tryfirst=True)  # the plugin's own sections before other plugins'
def pytest_aoti_terminal_summary(
    terminalreporter: Any, config: pytest.Config, records: Sequence[CheckRecord]
) -> None:
    unmeasured = [r for r in records if r.other_fields.get("extra_bytes_unmeasured")]
    if unmeasured:
        devices = ", ".join(sorted({record.device for record in unmeasured}))
        terminalreporter.write_line(
            f"aoti: max_extra_bytes was not measured in {len(unmeasured)} check(s) on "
            f"{devices}: device memory is measured on CUDA only"
        )


@pytest.hookimpl  # also read outside a run, by a plain plugin manager
def pytest_aoti_feature() -> Feature:
    return MEMORY


def pytest_addoption(parser: pytest.Parser) -> None:
    MEMORY.add_options(parser)
