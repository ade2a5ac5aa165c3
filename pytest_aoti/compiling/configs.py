"""Inductor option keys, checked before anything is compiled."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_aoti.compiling.pipeline import unknown_inductor_options
from pytest_aoti.errors import AotiUsageError

_KNOWN: set[frozenset[str]] = set()
"""Key sets already found valid in this process (torch's list is read once per set)."""


def check_inductor_configs(configs: Mapping[str, Any]) -> None:
    """Refuse unknown Inductor keys ("did you mean") now, not after seconds of compiling."""
    __tracebackhide__ = True
    keys = frozenset(configs)
    if not keys or keys in _KNOWN:
        return
    problem = unknown_inductor_options(configs)
    if problem:
        raise AotiUsageError(
            f"inductor_configs: {problem} (the call's, the marker's, the "
            "pytest_aoti_inductor_configs hook's and the ini file's options are merged)"
        )
    _KNOWN.add(keys)
