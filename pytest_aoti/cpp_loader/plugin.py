"""The C++ loader plugin (``aoti-cpp-loader``): each program's package loaded by
``AOTIModelPackageLoader`` in a process without Python, against the Python engine and eager;
the runner's build started at the setup of the first test that uses the ``aoti`` fixture;
why a machine skips it in the header, what it ran in the summary."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_aoti.api import session_of
from pytest_aoti.cpp_loader.feature import CPP_LOADER, CppLoaderOptions
from pytest_aoti.cpp_loader.lines import header_line, summary_lines
from pytest_aoti.cpp_loader.toolchain import machine_reason

if TYPE_CHECKING:
    from pytest_aoti.api import Check, CheckRecord, Feature
    from pytest_aoti.cpp_loader.build import BackgroundBuild

_BUILD: pytest.StashKey[BackgroundBuild | None] = pytest.StashKey()
"""The runner's build this session started (None: it needed none)."""


@pytest.hookimpl(tryfirst=True)
def pytest_aoti_checks(config: pytest.Config) -> list[Check]:
    from pytest_aoti.cpp_loader.check import CppLoaderCheck  # imports torch

    return [CppLoaderCheck()]


@pytest.hookimpl  # also read outside a run, by a plain plugin manager
def pytest_aoti_feature() -> Feature:
    return CPP_LOADER


def pytest_addoption(parser: pytest.Parser) -> None:
    CPP_LOADER.add_options(parser)


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


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Start the runner's build in the background at the first test that will check with it
    (it uses the ``aoti`` fixture, on CPU or CUDA, the check on), so that it runs beside the
    test's export and compile: a session without such a test builds nothing."""
    config = item.config
    if _BUILD in config.stash or not _checks_with_the_loader(item):
        return
    from pytest_aoti.cpp_loader.build import start_runner_build
    from pytest_aoti.cpp_loader.check import session_cache_place  # imports torch

    root, writable = session_cache_place(config)
    config.stash[_BUILD] = start_runner_build(root, writable=writable)


def _checks_with_the_loader(item: pytest.Item) -> bool:
    if "aoti" not in getattr(item, "fixturenames", ()):
        return False
    callspec = getattr(item, "callspec", None)
    device = callspec.params.get("aoti_device") if callspec is not None else None
    if isinstance(device, str) and device.partition(":")[0] not in ("cpu", "cuda"):
        return False
    for marker in item.iter_markers("aoti"):  # the closest that sets it decides
        if "cpp_loader" in marker.kwargs:
            return marker.kwargs["cpp_loader"] is True
    return bool(session_of(item.config).settings.checks.of(CppLoaderOptions).cpp_loader)


def pytest_aoti_terminal_summary(
    terminalreporter: Any, config: pytest.Config, records: Sequence[CheckRecord]
) -> None:
    for line in summary_lines([record.other_fields.get("cpp_loader") for record in records]):
        terminalreporter.write_line(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    build = config.stash.get(_BUILD, None)
    if build is not None:  # a build no check waited for: ended, nothing half-written kept
        build.stop()
    runner = sys.modules.get("pytest_aoti.cpp_loader.runner")
    if runner is not None:  # a runner may be running: end it, without waiting for its exit
        runner.shutdown(wait=False)
