"""Hypothesis' terminal summary, left out of a run that never used Hypothesis.

pytest-aoti depends on Hypothesis (for generated shapes), so Hypothesis' own pytest plugin is
loaded in every run. Its ``pytest_terminal_summary`` imports the whole ``hypothesis`` package
(1.4–4 s measured on a loaded 2-core machine, a fifth of a warm rerun) to read what the
package recorded, even when no test imported it. In a process where ``hypothesis`` was never
imported and no report carries Hypothesis data (statistics or failing examples sent by xdist
workers), that summary has nothing to print, so the plugin is unregistered before it runs.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

HYPOTHESIS_PLUGIN = "hypothesispytest"
# the keys Hypothesis' plugin puts on ``report.__dict__`` for its summary
_REPORT_KEYS = ("_hypothesis_stats", "_hypothesis_failing_examples")


def leave_out_idle_summary(config: pytest.Config) -> bool:
    """Unregister Hypothesis' plugin when its terminal summary has nothing to show; True
    when it was left out."""
    if "hypothesis" in sys.modules:
        return False
    plugin = config.pluginmanager.get_plugin(HYPOTHESIS_PLUGIN)
    if plugin is None:
        return False
    try:
        wants_statistics = bool(config.getoption("hypothesis_show_statistics"))
    except ValueError:  # an option another Hypothesis version does not have
        wants_statistics = True
    if wants_statistics or _reports_carry_hypothesis_data(config):
        return False
    config.pluginmanager.unregister(plugin)
    return True


def _reports_carry_hypothesis_data(config: pytest.Config) -> bool:
    reporter: Any = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return False
    return any(
        key in getattr(report, "__dict__", {})
        for reports in reporter.stats.values()
        for report in reports
        for key in _REPORT_KEYS
    )
