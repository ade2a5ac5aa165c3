"""The generated values' hooks: their check."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_aoti.checks.base import Check


def pytest_aoti_checks() -> list[Check]:
    from pytest_aoti.values.check import ValuesCheck

    return [ValuesCheck()]
