"""The validated options of one pytest run: :class:`AotiSettings`, read from the rows.

Pure logic without torch: a bad command-line or ini value is a usage error at startup.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any

import pytest

from pytest_aoti import features
from pytest_aoti.features import CheckOptions, FeatureSettings
from pytest_aoti.options.option import Option
from pytest_aoti.options.table import DEFAULT_CACHE_MAX_SIZE, rows
from pytest_aoti.options.values import writable_dir_problem


@dataclass(frozen=True)
class AotiSettings(FeatureSettings):
    """Validated values of every option: command line first, then ini file, then default.

    Session settings are fields (the features' own are inherited from
    :class:`~pytest_aoti.features.FeatureSettings`); the command-line and ini values of
    per-check options (``--aoti-examples``, ...) are :attr:`checks`."""

    devices: tuple[str, ...] = ("auto",)
    export_modes: tuple[str, ...] = ("default",)
    rtol: float | None = None
    """``--aoti-rtol``: below the tolerance hook, the marker and the call."""
    atol: float | None = None
    inductor_configs: dict[str, Any] | None = None
    report: Path | None = None
    profile: Path | None = None
    durations: int = 5
    cache_mode: str = "readwrite"
    cache_dir: Path | None = None
    cache_max_size: int = DEFAULT_CACHE_MAX_SIZE
    cache_clear: bool = False
    cache_url: str | None = None
    cache_remote: str = "readwrite"
    cache_storage_options: dict[str, Any] | None = None
    cache_trusted_keys: tuple[str, ...] = ()
    cache_not_before: float | None = None
    checks: CheckOptions = dataclass_field(default_factory=CheckOptions)
    """The command-line and ini values of the per-check options (their defaults where
    neither sets them)."""


def read_settings(config: pytest.Config) -> AotiSettings:
    """Read the options; a bad ini value raises ``pytest.UsageError`` naming the ini key."""
    values: dict[str, Any] = {}
    checks: dict[str, Any] = {}
    for option in rows():
        if option.parse is None:
            continue
        value = _value(config, option)
        if option.path and value is not None:
            value = _path(config, value)
            if option.path in ("dir", "file") and not hasattr(config, "workerinput"):
                # the xdist controller checked it already
                directory = value if option.path == "dir" else value.parent
                problem = writable_dir_problem(directory, f"--{option.name}={value}")
                if problem:
                    raise pytest.UsageError(problem)
            if option.path == "file" and value.is_dir():
                raise pytest.UsageError(f"--{option.name}={value} is a directory; name a file")
        if option.per_check:
            checks[option.keyword_name] = value
        else:
            values[option.attribute] = value
    if values.get("cache_clear") and values.get("cache_mode") != "readwrite":
        raise pytest.UsageError(
            f"--aoti-cache-clear empties the cache, which --aoti-cache={values['cache_mode']} "
            "never writes: drop --aoti-cache-clear, or clear it with --aoti-cache=readwrite"
        )
    return AotiSettings(**values, checks=features.options_from(checks))


def _path(config: pytest.Config, text: str) -> Path:
    path = Path(text).expanduser()
    return path if path.is_absolute() else config.rootpath / path


def _value(config: pytest.Config, option: Option) -> Any:
    assert option.parse is not None
    given = config.getoption(option.dest) if option.cli else None
    if option.flag:
        if given or option.ini_key is None:
            return bool(given)  # a switch given, or one without an ini twin
        given = None  # not given: its ini twin decides
    if given is not None:
        return tuple(given) if option.many else given
    if option.ini_key is None:
        return option.default
    text = config.getini(option.ini_key)
    if text in (None, "", []):
        return option.default
    if option.many:
        try:
            return tuple(option.parse(line.strip()) for line in text if line.strip())
        except argparse.ArgumentTypeError as error:
            raise pytest.UsageError(f"ini option {option.ini_key}: {error}") from None
    try:
        return option.parse(str(text).strip())
    except argparse.ArgumentTypeError as error:
        # a store's URL or options may carry a credential: their values are not echoed
        secret = option.name in ("aoti-cache-url", "aoti-cache-storage-options")
        shown = "" if secret else f" = {text!r}"
        raise pytest.UsageError(f"ini option {option.ini_key}{shown}: {error}") from None
