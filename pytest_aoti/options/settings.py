"""The validated options of one pytest run (:class:`AotiSettings`). No torch: a bad value is a
usage error at startup."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pytest_aoti.options.catalog import Catalog
from pytest_aoti.options.check_options import CheckOptions
from pytest_aoti.options.core_rows import DEFAULT_CACHE_MAX_SIZE
from pytest_aoti.options.option import Option
from pytest_aoti.options.parsers import writable_dir_problem

_Settings = TypeVar("_Settings")


@dataclass(frozen=True)
class AotiSettings:
    """Every option's validated value: the core's as fields, each feature's via :meth:`of`."""

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
    checks: CheckOptions = dataclass_field(default_factory=CheckOptions)
    """The command-line and ini values of the per-check options (else their defaults)."""
    features: Mapping[type, Any] = dataclass_field(default_factory=dict)
    """Each feature plugin's session settings, by its settings class."""

    def of(self, settings: type[_Settings]) -> _Settings:
        """The settings of the feature whose settings class is ``settings``, or its defaults."""
        found = self.features.get(settings)
        return found if found is not None else settings()


def read_settings(config: pytest.Config, catalog: Catalog) -> AotiSettings:
    """Read the options of ``catalog`` (the run's); a bad ini value is a usage error."""
    core = {item.name for item in fields(AotiSettings)}
    values: dict[str, Any] = {}
    feature_values: dict[str, Any] = {}
    checks: dict[str, Any] = {}
    given: set[str] = set()
    for option in catalog.rows():
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
            if _given_by_user(config, option):
                given.add(option.keyword_name)
        elif option.attribute in core:
            values[option.attribute] = value
        else:
            feature_values[option.attribute] = value
    if values.get("cache_clear") and values.get("cache_mode") != "readwrite":
        raise pytest.UsageError(
            f"--aoti-cache-clear empties the cache, which --aoti-cache={values['cache_mode']} "
            "never writes: drop --aoti-cache-clear, or clear it with --aoti-cache=readwrite"
        )
    return AotiSettings(
        **values,
        checks=replace(catalog.check_options(checks), given=frozenset(given)),
        features=catalog.settings_of(feature_values),
    )


def _path(config: pytest.Config, text: str) -> Path:
    path = Path(text).expanduser()
    return path if path.is_absolute() else config.rootpath / path


def _given_by_user(config: pytest.Config, option: Option) -> bool:
    """Whether ``option`` was given on the command line or in the ini file."""
    given = config.getoption(option.dest) if option.cli else None
    if given is not None and not (option.flag and not given):
        return True
    return option.ini_key is not None and config.getini(option.ini_key) not in (None, "", [])


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
    try:
        if option.many:
            return tuple(option.parse(line.strip()) for line in text if line.strip())
        return option.parse(str(text).strip())
    except argparse.ArgumentTypeError as error:
        shown = "" if option.secret or option.many else f" = {text!r}"
        raise pytest.UsageError(f"ini option {option.ini_key}{shown}: {error}") from None
