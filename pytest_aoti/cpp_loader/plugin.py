"""The C++ loader plugin (``aoti-cpp-loader``): each program's package loaded by
``AOTIModelPackageLoader`` in a process without Python, against the Python engine and eager;
why a machine skips it in the header, what it ran in the summary."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_aoti.api import add_options, session_of
from pytest_aoti.cpp_loader.feature import CPP_LOADER, CppLoaderOptions
from pytest_aoti.cpp_loader.lines import header_line, summary_lines
from pytest_aoti.cpp_loader.toolchain import machine_reason

if TYPE_CHECKING:
    from pytest_aoti.api import Check, CheckRecord, Feature


@pytest.hookimpl(tryfirst=True)
def pytest_aoti_checks(config: pytest.Config) -> list[Check]:
    from pytest_aoti.cpp_loader.check import CppLoaderCheck  # imports torch

    return [CppLoaderCheck()]


@pytest.hookimpl  # also read outside a run, by a plain plugin manager
def pytest_aoti_feature() -> Feature:
    return CPP_LOADER


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser, CPP_LOADER)


def pytest_aoti_header_lines(config: pytest.Config) -> list[str]:
    """Why this machine skips the check, once: no compiler, no headers, or a failed build
    remembered in the cache (read without importing torch)."""
    settings = session_of(config).settings
    if not settings.checks.of(CppLoaderOptions).cpp_loader:
        return []
    reason = machine_reason()
    if reason:
        return [header_line(reason)]
    from pytest_aoti.cpp_loader.build import FOLDER, remembered_failure

    root = _known_cache_root(config)
    remembered = remembered_failure(root)
    return [header_line(remembered, str(root / FOLDER))] if root and remembered else []


def _known_cache_root(config: pytest.Config) -> Path | None:
    """The cache root where it already exists (the header creates no folder)."""
    settings = session_of(config).settings
    if settings.cache_mode == "off":
        return None
    if settings.cache_dir is not None:
        return Path(settings.cache_dir)
    if getattr(config, "cache", None) is None:
        return None
    # where pytest's cache provider puts it: the ini's cache_dir, from the root folder
    cache_dir = Path(os.path.expandvars(os.path.expanduser(str(config.getini("cache_dir")))))
    folder = config.rootpath / cache_dir / "d" / "aoti"
    return folder if folder.is_dir() else None


def pytest_aoti_terminal_summary(
    terminalreporter: Any, config: pytest.Config, records: Sequence[CheckRecord]
) -> None:
    for line in summary_lines([record.other_fields.get("cpp_loader") for record in records]):
        terminalreporter.write_line(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    runner = sys.modules.get("pytest_aoti.cpp_loader.runner")
    if runner is not None:  # a runner may be running: end it
        runner.shutdown()
