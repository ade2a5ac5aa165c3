"""The probes plugin's own hook: which edge-value variants run, and whether they fail.

Edge values (NaN, infinities, magnitudes near overflow) are deployment probes of a kind of
their own (``values``); the values plugin decides them through this hook. Without an
answer (the values plugin blocked) no edge value is probed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_aoti.api import CheckPlan


@pytest.hookspec(firstresult=True)
def pytest_aoti_edge_values(plan: CheckPlan) -> tuple[str, frozenset[str]] | None:
    """Return ``(mode, inputs left out)`` for the edge values of ``plan``'s probes: mode
    ``"report"`` (run them, report what is wrong), ``"fail"`` (a wrong one fails the check)
    or ``"off"``; None: no edge values."""
