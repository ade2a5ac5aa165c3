"""The values of pytest-aoti's options: parsers for the command line and ini file, and
the checks of values a test passes in a marker or call.

A parser turns text into a value or raises ``argparse.ArgumentTypeError`` with what to
write instead; a ``*_problem`` check returns what is wrong with a value ("" when nothing
is). The option table that uses them is :data:`pytest_aoti.settings.OPTIONS`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

CACHE_MODES = ("off", "read", "readwrite")

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


def parse_non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {value}")
    return value


def parse_positive_int(text: str) -> int:
    value = parse_non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected 1 or more, got 0")
    return value


def parse_tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number such as 1e-5, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a tolerance of 0 or more, got {value}")
    return value


HF_PREFIX = "hf:"
_MODEL_SPEC_FORMS = "module.path:callable, path/to/file.py:callable or hf:MODEL_TYPE"


def parse_model_spec(text: str) -> str:
    """The form of an ``--aoti-model`` spec only: resolving it (importing the module,
    building an ``hf:`` config) waits for the rootdir, in ``pytest_aoti.models.spec``."""
    spec = str(text).strip()
    if spec.startswith(HF_PREFIX):
        if not spec[len(HF_PREFIX) :].strip("?/"):
            raise argparse.ArgumentTypeError(f"{spec!r}: expected hf:MODEL_TYPE such as hf:bert")
        return spec
    target, _, name = spec.rpartition(":")
    if not target or not name or not name.replace(".", "").isidentifier():
        raise argparse.ArgumentTypeError(f"{spec!r}: expected {_MODEL_SPEC_FORMS}")
    return spec


RANDOM_MODES = ("fail", "shapes")
"""What a check does with a program that draws random numbers: ``fail`` (eager and the
engine draw different numbers), or compare ``shapes`` (output structure, shapes and dtypes,
and the values of the outputs no random op feeds)."""


def parse_random_mode(text: str) -> str:
    mode = str(text).strip().lower()
    if mode not in RANDOM_MODES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(RANDOM_MODES)}, got {text!r}")
    return mode


EXPORT_MODES = ("default", "strict", "non-strict")


def parse_export_modes(text: str) -> tuple[str, ...]:
    """``"strict,non-strict"`` → ``("strict", "non-strict")``."""
    modes = tuple(part.strip().lower() for part in str(text).split(",") if part.strip())
    unknown = [mode for mode in modes if mode not in EXPORT_MODES]
    if not modes or unknown:
        raise argparse.ArgumentTypeError(
            f"expected strict, non-strict, default or a comma list such as strict,non-strict, "
            f"got {text!r}"
        )
    if len(set(modes)) != len(modes):
        raise argparse.ArgumentTypeError(f"export mode listed twice in {text!r}")
    return modes


PROBE_POLICIES = ("off", "report", "fail")


def parse_probe_policy(text: str) -> str:
    """``off``, ``report`` or ``fail``: what deployment probes do after a passing check."""
    policy = str(text).strip().lower()
    if policy not in PROBE_POLICIES:
        raise argparse.ArgumentTypeError(
            f"expected one of {', '.join(PROBE_POLICIES)}, got {text!r}"
        )
    return policy


def probe_policy_problem(name: str, value: Any) -> str:
    if isinstance(value, str) and value.strip().lower() in PROBE_POLICIES:
        return ""
    return f"{name} must be one of {', '.join(PROBE_POLICIES)}, got {value!r}"


HAZARD_VIEWS = ("summary", "all")


def parse_hazard_view(text: str) -> str:
    """``summary`` or ``all``: how the terminal lists deployment hazards."""
    view = str(text).strip().lower()
    if view not in HAZARD_VIEWS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(HAZARD_VIEWS)}, got {text!r}")
    return view


PROBE_LAYOUT_KINDS = (
    "channels_last",
    "channels_last_3d",
    "permuted",
    "strided_slice",
    "storage_offset",
)
PROBE_KINDS = (*PROBE_LAYOUT_KINDS, "size", "dtype", "device", "scalar", "aliased")
"""The kinds of deployment-probe variants; ``probes_skip`` names these."""


def probes_skip_problem(name: str, value: Any) -> str:
    """What is wrong with a ``probes_skip`` value: a set of kinds (``"*"``: all), or a
    dict of input name to such a set."""
    if value is None:
        return ""

    def kinds_problem(names: Any, where: str) -> str:
        if isinstance(names, str):
            names = {names}
        if not isinstance(names, Iterable):
            return f"{name}{where} must be a set of variant kinds"
        unknown = sorted({str(item) for item in names} - set(PROBE_KINDS) - {"*"})
        if unknown:
            return (
                f"{name}{where} names unknown variant kind(s) {', '.join(unknown)}; "
                f"known: {', '.join(PROBE_KINDS)} (or * for all)"
            )
        return ""

    if isinstance(value, Mapping):
        for key, names in value.items():
            problem = kinds_problem(names, f"[{key!r}]")
            if problem:
                return problem
        return ""
    return kinds_problem(value, "")


def parse_json_object(text: str) -> dict[str, Any]:
    """A JSON object, e.g. ``{"max_autotune": false}``."""
    try:
        value = json.loads(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"expected a JSON object, got {text!r} ({error})"
        ) from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def parse_storage_options(text: str) -> dict[str, Any]:
    """A JSON object of a store's options; a mistake is shown by position, never by value
    (the text may hold a credential, which is refused later)."""
    try:
        value = json.loads(text)
    except ValueError as error:
        where = getattr(error, "msg", "not JSON")
        line, column = getattr(error, "lineno", "?"), getattr(error, "colno", "?")
        raise argparse.ArgumentTypeError(
            f"expected a JSON object ({where} at line {line} column {column})"
        ) from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, not a {type(value).__name__}")
    return value


def parse_cache_url(text: str) -> str:
    """An fsspec URL such as ``s3://bucket/prefix`` or ``file:///shared/aoti``."""
    url = str(text).strip()
    if "://" not in url or not url.split("://", 1)[1].strip("/"):
        # the value is not echoed: a mistyped URL may still carry a password
        raise argparse.ArgumentTypeError(
            "expected an fsspec URL such as s3://bucket/prefix or file:///path"
        )
    return url


def parse_utc_time(text: str) -> float:
    """An ISO 8601 UTC time such as ``2026-12-01T12:00:00Z``, as seconds since the epoch."""
    import datetime

    value = str(text).strip()
    try:
        moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        moment = None
    if moment is None or moment.utcoffset() != datetime.timedelta(0):
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 UTC time such as 2026-12-01T12:00:00Z, got {value!r}"
        )
    return moment.timestamp()


def parse_path_list(text: str) -> tuple[str, ...]:
    """Paths one per line (or separated by spaces)."""
    return tuple(part for part in str(text).split() if part)


def count_problem(name: str, value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return ""
    return f"{name} must be a positive int, got {value!r}"


def non_negative_problem(name: str, value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return ""
    return f"{name} must be an int >= 0, got {value!r}"


def switch_problem(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return ""
    return f"{name} must be True or False, got {value!r}"


def bytes_problem(name: str, value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return ""
    return f"{name} must be a number of bytes (an int >= 0), got {value!r}"


def random_problem(name: str, value: Any) -> str:
    if value in RANDOM_MODES:
        return ""
    return f"{name} must be one of {', '.join(repr(mode) for mode in RANDOM_MODES)}, got {value!r}"


def writable_dir_problem(path: Path, option: str) -> str:
    """What stops the run writing in directory ``path`` ("" when nothing), made now so an
    unusable place stops the run before any compile; ``option`` is the option as given."""
    existing = next((place for place in (path, *path.parents) if place.exists()), None)
    if existing is not None and not existing.is_dir():
        return (
            f"{option}: {existing} is a file, not a directory; "
            "pass a path whose parent is a directory (or does not exist yet)"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".pytest-aoti-write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        return (
            f"{option}: cannot write in {path} ({error.strerror or error}); "
            "pass a directory you can write to"
        )
    return ""
