"""Command-line options, their ini twins, and the validated settings read from them.

Pure logic without torch: parsing here is what makes a bad value a usage error at startup.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CACHE_MODES = ("off", "read", "readwrite")
DEFAULT_EXAMPLES = 20
DEFAULT_MAX_DIM = 64
DEFAULT_CACHE_MAX_SIZE = 4 * 2**30

_DEVICE = re.compile(r"^(cpu|auto|cuda(:\d+)?)$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def parse_devices(text: str) -> tuple[str, ...]:
    """``"cpu,cuda:1"`` → ``("cpu", "cuda:1")``; raises ``ArgumentTypeError`` on a bad name."""
    names = tuple(part.strip().lower() for part in str(text).split(",") if part.strip())
    if not names:
        raise argparse.ArgumentTypeError("expected cpu, cuda, cuda:N, auto or a comma list")
    for name in names:
        if not _DEVICE.match(name):
            raise argparse.ArgumentTypeError(
                f"unknown device {name!r}: use cpu, cuda, cuda:N, auto or a comma list such as cpu,cuda"
            )
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"device listed twice in {text!r}")
    return names


def parse_size(text: str) -> int:
    """``"4GiB"``, ``"500M"``, ``"1024"`` → bytes."""
    match = _SIZE.match(str(text))
    if not match:
        raise argparse.ArgumentTypeError(f"expected a size such as 4GiB or 500MB, got {text!r}")
    number, unit = match.groups()
    return int(float(number) * 1024 ** " kmgt".index(unit.lower() or " "))


def parse_cache_mode(text: str) -> str:
    mode = str(text).strip().lower()
    if mode not in CACHE_MODES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(CACHE_MODES)}, got {text!r}")
    return mode


def parse_switch(text: str) -> bool:
    """``on``/``off`` (also true/false, yes/no, 1/0) → bool."""
    word = str(text).strip().lower()
    if word in ("on", "true", "yes", "1"):
        return True
    if word in ("off", "false", "no", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected on or off, got {text!r}")


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {value}")
    return value


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected 1 or more, got 0")
    return value


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number such as 1e-5, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a tolerance of 0 or more, got {value}")
    return value


@dataclass(frozen=True)
class _Option:
    name: str
    parse: Callable[[str], Any]
    default: Any
    help: str

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")


_OPTIONS = (
    _Option(
        "aoti-device",
        parse_devices,
        ("auto",),
        "Device(s) AOTI tests run on: cpu, cuda, cuda:N, auto (cuda when available, else cpu) "
        "or a comma list such as cpu,cuda that runs every AOTI test on each. Default: auto.",
    ),
    _Option(
        "aoti-rtol",
        _tolerance,
        None,
        "Relative tolerance of every check. Default: by dtype, as torch.testing.assert_close.",
    ),
    _Option(
        "aoti-atol",
        _tolerance,
        None,
        "Absolute tolerance of every check. Default: by dtype, as torch.testing.assert_close.",
    ),
    _Option(
        "aoti-examples",
        _non_negative_int,
        DEFAULT_EXAMPLES,
        f"Generated input shapes per dynamic-shape check; 0 turns generation off. Default: {DEFAULT_EXAMPLES}.",
    ),
    _Option(
        "aoti-max-dim",
        _positive_int,
        DEFAULT_MAX_DIM,
        f"Largest size drawn for a generated dim, and the cap of unbounded ranges. Default: {DEFAULT_MAX_DIM}.",
    ),
    _Option(
        "aoti-cache",
        parse_cache_mode,
        "readwrite",
        "Compiled-package cache: off, read or readwrite. Default: readwrite.",
    ),
    _Option(
        "aoti-cache-dir",
        str,
        None,
        "Directory of the compiled-package cache, e.g. one shared by CI machines. "
        "Default: .pytest_cache/d/aoti.",
    ),
    _Option(
        "aoti-localize",
        parse_switch,
        True,
        "When the AOTI compile broke a check, compile one instrumented program to name the "
        "first diverging graph node and its source line: on or off. Default: on.",
    ),
    _Option(
        "aoti-keep-failed",
        str,
        None,
        "Directory where each failing check leaves a repro bundle (exported program, inputs, "
        "package, finding, and a repro.py that needs only torch). Default: none.",
    ),
    _Option(
        "aoti-report",
        str,
        None,
        "Write a JSON report of every AOTI check (figures, cache use, timings, failures) to "
        "this file at the end of the session, merged across xdist workers. Default: none.",
    ),
    _Option(
        "aoti-profile",
        str,
        None,
        "Directory for a Chrome trace (torch.profiler) of the engine's calls of each AOTI "
        "check. Default: none.",
    ),
    _Option(
        "aoti-durations",
        _non_negative_int,
        5,
        "Show the N slowest AOTI checks in the terminal summary; 0 for all. Default: 5.",
    ),
    _Option(
        "aoti-cache-max-size",
        parse_size,
        DEFAULT_CACHE_MAX_SIZE,
        "Size above which least-recently-used packages are evicted. Default: 4GiB.",
    ),
)


def add_options(parser: pytest.Parser) -> None:
    """Register every ``--aoti-*`` option and its ini twin in one ``aoti`` group."""
    group = parser.getgroup("aoti", "AOTInductor checks (pytest-aoti)")
    for option in _OPTIONS:
        group.addoption(
            f"--{option.name}",
            dest=option.dest,
            type=option.parse,
            default=None,
            metavar=option.dest.upper().removeprefix("AOTI_"),
            help=option.help,
        )
        parser.addini(option.dest, help=option.help, default=None)
    group.addoption(
        "--aoti-cache-clear",
        dest="aoti_cache_clear",
        action="store_true",
        default=False,
        help="Empty the compiled-package cache at session start.",
    )


@dataclass(frozen=True)
class AotiSettings:
    """Validated values of every option: command line first, then ini file, then default."""

    devices: tuple[str, ...]
    rtol: float | None
    atol: float | None
    examples: int
    max_dim: int
    cache_mode: str
    cache_dir: Path | None
    cache_max_size: int
    cache_clear: bool
    localize: bool = True
    keep_failed: Path | None = None
    report: Path | None = None
    profile: Path | None = None
    durations: int = 5


def read_settings(config: pytest.Config) -> AotiSettings:
    """Read the options; a bad ini value raises ``pytest.UsageError`` naming the ini key."""
    values = {option.dest: _value(config, option) for option in _OPTIONS}
    cache_dir = _path(config, values["aoti_cache_dir"])
    keep_failed = _path(config, values["aoti_keep_failed"])
    report = _path(config, values["aoti_report"])
    profile = _path(config, values["aoti_profile"])
    for option, directory in [
        ("--aoti-keep-failed", keep_failed),
        ("--aoti-report", None if report is None else report.parent),
        ("--aoti-profile", profile),
    ]:
        if directory is not None:
            _check_writable_dir(directory, option)
    if report is not None and report.is_dir():
        raise pytest.UsageError(f"--aoti-report={report} is a directory; name a file")
    return AotiSettings(
        devices=values["aoti_device"],
        rtol=values["aoti_rtol"],
        atol=values["aoti_atol"],
        examples=values["aoti_examples"],
        max_dim=values["aoti_max_dim"],
        cache_mode=values["aoti_cache"],
        cache_dir=cache_dir,
        cache_max_size=values["aoti_cache_max_size"],
        cache_clear=bool(config.getoption("aoti_cache_clear")),
        localize=values["aoti_localize"],
        keep_failed=keep_failed,
        report=report,
        profile=profile,
        durations=values["aoti_durations"],
    )


def _path(config: pytest.Config, text: str | None) -> Path | None:
    if text is None:
        return None
    path = Path(text).expanduser()
    return path if path.is_absolute() else config.rootpath / path


def _check_writable_dir(path: Path, option: str) -> None:
    """Create ``path`` now, so an unusable directory stops the run before any compile."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # the controller checked it already; workers race each other's probe files
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".pytest-aoti-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise pytest.UsageError(
            f"{option}={path}: cannot write there ({error.strerror or error}); "
            "pass a directory you can write to"
        ) from None


def _value(config: pytest.Config, option: _Option) -> Any:
    given = config.getoption(option.dest)
    if given is not None:
        return given
    text = config.getini(option.dest)
    if text in (None, "", []):
        return option.default
    try:
        return option.parse(str(text).strip())
    except argparse.ArgumentTypeError as error:
        raise pytest.UsageError(f"ini option {option.dest} = {text!r}: {error}") from None
