"""A hook of pytest-aoti called the features' way: the features' implementations first, in
the feature list's order, then every other plugin's and conftest's, in conftest order.

Pure glue without torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from pytest_aoti import features


def feature_plugins(config: pytest.Config) -> list[object]:
    """The features' plugin modules pytest registered (``pytest_plugins`` of the plugin)."""
    found = (config.pluginmanager.get_plugin(name) for name in features.plugins())
    return [plugin for plugin in found if plugin is not None]


def feature_results(config: pytest.Config, name: str, kwargs: Mapping[str, Any]) -> list[Any]:
    """Hook ``name``'s results from the features' implementations, in feature order."""
    by_plugin = {id(impl.plugin): impl for impl in getattr(config.hook, name).get_hookimpls()}
    results = []
    for plugin in feature_plugins(config):
        impl = by_plugin.get(id(plugin))
        if impl is not None:  # pluggy's own call: each implementation names what it takes
            results.append(impl.function(*(kwargs[arg] for arg in impl.argnames)))
    return results


def other_results(config: pytest.Config, name: str, kwargs: Mapping[str, Any]) -> list[Any]:
    """Hook ``name``'s results from every other plugin and conftest, in conftest order."""
    caller = config.pluginmanager.subset_hook_caller(name, feature_plugins(config))
    return list(reversed(caller(**kwargs)))  # pluggy calls the latest registered first


def results_in_feature_order(
    config: pytest.Config, name: str, kwargs: Mapping[str, Any]
) -> list[Any]:
    """The features' results, then the others' (:func:`feature_results`, :func:`other_results`)."""
    return [*feature_results(config, name, kwargs), *other_results(config, name, kwargs)]
