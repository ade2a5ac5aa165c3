"""A hook of the plugin's own, called through pluggy in the default plugins' order: each default
plugin's implementation alone, in ``DEFAULT_PLUGINS`` order, then every other plugin's and
conftest's together. pluggy calls the implementations of one priority last registered first;
the answers here keep the order the docs give (checks, summary sections) whatever the order
the plugins were registered in. No torch at import time."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import pluggy


@dataclass(frozen=True)
class Answer:
    """One implementation's answer, and where it came from."""

    result: Any
    plugin: str | None = None
    """The default plugin that answered (None: another plugin or a conftest)."""
    trylast: bool = False
    """The default plugin's implementation is ``trylast`` (its answer goes last)."""


def answers_in_order(
    manager: pluggy.PluginManager, name: str, defaults: Collection[str], **kwargs: Any
) -> list[Answer]:
    """Call hook ``name`` with ``kwargs``: each registered default plugin (``defaults``, in
    order) alone, then the others together, their answers in registration (conftest) order.
    A default plugin without an implementation, or blocked, gives no answer."""
    implementations = {
        id(impl.plugin): impl for impl in getattr(manager.hook, name).get_hookimpls()
    }
    plugins = manager.get_plugins()
    answers: list[Answer] = []
    defaults_found = []
    for plugin_name in defaults:
        plugin = manager.get_plugin(plugin_name)
        if plugin is None:
            continue
        defaults_found.append(plugin)
        implementation = implementations.get(id(plugin))
        if implementation is None:
            continue
        alone = manager.subset_hook_caller(
            name, [other for other in plugins if other is not plugin]
        )
        results = alone(**kwargs)
        answers.append(
            Answer(results[0] if results else None, plugin_name, bool(implementation.trylast))
        )
    others = manager.subset_hook_caller(name, defaults_found)(**kwargs)
    answers.extend(Answer(result) for result in reversed(others))
    return answers
