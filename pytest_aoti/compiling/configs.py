"""Inductor option keys, checked before anything is compiled."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_aoti.errors import AotiUsageError

_KNOWN: set[frozenset[str]] = set()
"""Key sets already found valid in this process (torch's list is read once per set)."""


def check_inductor_configs(configs: Mapping[str, Any]) -> None:
    """Raise :class:`~pytest_aoti.AotiUsageError` for keys Inductor does not know, with
    "did you mean", wherever they came from (call, marker, hook, ini file): the same
    check for all, before a compile that would fail on them after seconds."""
    __tracebackhide__ = True
    keys = frozenset(configs)
    if not keys or keys in _KNOWN:
        return
    from pytest_aoti.compiling.pipeline import unknown_inductor_options

    problem = unknown_inductor_options(configs)
    if problem:
        raise AotiUsageError(
            f"inductor_configs: {problem} (the call's, the marker's, the "
            "pytest_aoti_inductor_configs hook's and the ini file's options are merged)"
        )
    _KNOWN.add(keys)
