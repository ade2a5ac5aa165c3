"""The plugin's default plugins, as pytest's own ``default_plugins``: every feature, a module
of hooks on :mod:`pytest_aoti.api`, each blockable with ``-p no:NAME``.
No torch at import time."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

import pluggy

from pytest_aoti import hookspecs
from pytest_aoti.hook_order import answers_in_order
from pytest_aoti.options.catalog import Catalog
from pytest_aoti.run.added import PluginChecks, plugin_checks

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pytest

    from pytest_aoti.options.feature import Feature

DEFAULT_PLUGINS: dict[str, str] = {
    "aoti-memory": "pytest_aoti.memory.plugin",
    "aoti-threads": "pytest_aoti.threads.plugin",
    "aoti-generated": "pytest_aoti.generated.plugin",
    "aoti-values": "pytest_aoti.values.plugin",
    "aoti-precision": "pytest_aoti.precision.plugin",
    "aoti-probes": "pytest_aoti.probes.plugin",
    "aoti-weights": "pytest_aoti.weights.plugin",
    "aoti-cpp-loader": "pytest_aoti.cpp_loader.plugin",
    "aoti-timing": "pytest_aoti.timing.plugin",
    "aoti-triage": "pytest_aoti.triage.plugin",
    "aoti-models": "pytest_aoti.models.plugin",
    "aoti-fleet": "pytest_aoti.fleet.plugin",
    "aoti-golden": "pytest_aoti.golden.plugin",
}
"""Name -> module, in the order of their checks, ``--help`` options and summary sections."""


def register_defaults(pluginmanager: pytest.PytestPluginManager) -> None:
    """Register every default plugin ``-p no:NAME`` did not block, in the list's order (so
    their options follow it in ``--help``); the hooks whose order shows (their checks, their
    summary sections) are called in it by :func:`~pytest_aoti.hook_order.answers_in_order`."""
    for name, module in DEFAULT_PLUGINS.items():
        if pluginmanager.is_blocked(name) or pluginmanager.has_plugin(name):
            continue
        pluginmanager.register(importlib.import_module(module), name)


def default_features() -> list[Feature]:
    """Every default plugin's feature, outside a run (the options page, the tables' tests)."""
    return sorted(_declared(list(DEFAULT_PLUGINS)), key=_rank)


def default_catalog() -> Catalog:
    """Every default plugin's options, outside a run (a tester made without the fixture,
    the options page)."""
    return Catalog(default_features())


def default_checks() -> PluginChecks:
    """The default plugins' checks, in the order a run gets them, outside a run (a tester
    made without the fixture)."""
    answers = answers_in_order(
        default_manager(), "pytest_aoti_checks", DEFAULT_PLUGINS, config=None
    )
    return plugin_checks(answers)


def default_manager(names: Sequence[str] | None = None) -> pluggy.PluginManager:
    """A plugin manager of the default plugins ``names`` (default: all), as a run registers
    them, for their hooks outside a run."""
    manager = pluggy.PluginManager("pytest")
    manager.add_hookspecs(hookspecs)
    for name in list(DEFAULT_PLUGINS) if names is None else names:
        manager.register(importlib.import_module(DEFAULT_PLUGINS[name]), name)
    return manager


def features_in_order(manager: pluggy.PluginManager) -> list[Feature]:
    """The registered plugins' features: the default plugins' in list order, then others'."""
    return sorted(manager.hook.pytest_aoti_feature(), key=_rank)


def _rank(feature: Feature) -> int:
    names = list(DEFAULT_PLUGINS)
    return names.index(feature.plugin_name) if feature.plugin_name in names else len(names)


def blocked_keywords(manager: pluggy.PluginManager) -> dict[str, str]:
    """Each keyword (and option) of a blocked default plugin -> the plugin's name."""
    blocked = [name for name in DEFAULT_PLUGINS if manager.is_blocked(name)]
    return {
        row.keyword_name: feature.plugin_name
        for feature in _declared(blocked)
        for row in feature.rows()
    }


def _declared(names: list[str]) -> list[Feature]:
    return list(default_manager(names).hook.pytest_aoti_feature())
