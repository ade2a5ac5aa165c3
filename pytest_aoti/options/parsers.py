"""The values of pytest-aoti's options: parsers for the command line and ini file (raising
``argparse.ArgumentTypeError``), and checks of a marker's or call's values (raising
:class:`ValueProblem`). A :class:`Words` vocabulary shares one word list between both."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pytest_aoti.trees import LAYOUTS


class ValueProblem(ValueError):
    """What is wrong with a marker's or call's option value; the message says what to write."""


class Words:
    """A vocabulary: an option's words, as a parser and a value check (case-insensitive)."""

    def __init__(self, *words: str, quoted: bool = False) -> None:
        self.words = words
        self.quoted = quoted  # the value check names them as strings: 'fail', 'shapes'

    def __iter__(self) -> Iterator[str]:
        return iter(self.words)

    def _word(self, value: Any) -> str | None:
        word = value.strip().lower() if isinstance(value, str) else None
        return word if word in self.words else None

    def parse(self, text: str) -> str:
        """Command-line or ini text to the word; ``ArgumentTypeError`` on another."""
        word = self._word(str(text))
        if word is None:
            raise argparse.ArgumentTypeError(
                f"expected one of {', '.join(self.words)}, got {text!r}"
            )
        return word

    def check(self, name: str, value: Any) -> str:
        """A marker's or call's value to the word; :class:`ValueProblem` on another."""
        word = self._word(value)
        if word is None:
            shown = map(repr, self.words) if self.quoted else self.words
            raise ValueProblem(f"{name} must be one of {', '.join(shown)}, got {value!r}")
        return word


CACHE_MODES = Words("off", "read", "readwrite")

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
    return CACHE_MODES.parse(text)


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


def parse_share(text: str) -> float:
    """``off``, a fraction (``0.25``) or a percentage (``25%``) → the share (``inf``: off)."""
    word = str(text).strip().lower()
    if word == "off":
        return math.inf
    try:
        value = float(word[:-1]) / 100 if word.endswith("%") else float(word)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected off, a share such as 0.25 or a percentage such as 25%, got {text!r}"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a share of 0 or more, got {text!r}")
    return value


def check_share(name: str, value: Any) -> float:
    if isinstance(value, str):
        try:
            return parse_share(value)
        except argparse.ArgumentTypeError:
            pass
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    raise ValueProblem(
        f"{name} must be 'off', a share such as 0.25 or a percentage such as '25%', got {value!r}"
    )


RANDOM_MODES = Words("fail", "shapes", quoted=True)
"""What a check does with a program that draws random numbers: ``fail``, or compare ``shapes``
(output structure, shapes and dtypes, and the values of the outputs no random op feeds)."""

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


def _layout_names(names: Any) -> tuple[str, ...] | str:
    """The layout names of ``names`` (a comma list, or an iterable of names), in order; a
    message saying what is wrong where they are not."""
    given = names
    if isinstance(names, str):
        names = names.split(",")
    elif isinstance(names, (set, frozenset)):
        names = sorted(names, key=str)  # run in one order every time
    try:
        chosen = tuple(str(name).strip().lower() for name in names if str(name).strip())
    except TypeError:
        return f"expected layout names, got {names!r}"
    if chosen == ("none",):
        return ()
    unknown = [name for name in chosen if name not in LAYOUTS]
    if unknown:
        valid = ", ".join(LAYOUTS)
        return f"unknown layout {', '.join(map(repr, unknown))}: use {valid} or none"
    if len(set(chosen)) != len(chosen):
        return f"layout listed twice in {given!r}"
    return chosen


def parse_layouts(text: str) -> tuple[str, ...]:
    """``"channels_last,permuted"`` → ``("channels_last", "permuted")``; ``none`` → ``()``."""
    chosen = _layout_names(str(text))
    if isinstance(chosen, str):
        raise argparse.ArgumentTypeError(chosen)
    return chosen


def check_layouts(name: str, value: Any) -> tuple[str, ...]:
    """A marker's or call's layouts: a tuple (or list, set) of names, or one name."""
    chosen = _layout_names(value) if not isinstance(value, (bytes, Mapping)) else None
    if chosen is None or isinstance(chosen, str):
        said = chosen or f"got {value!r}"
        raise ValueProblem(f"{name} must be layout names such as ('channels_last',): {said}")
    return chosen


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


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_count(name: str, value: Any) -> int:
    if _whole(value) and value >= 1:
        return int(value)
    raise ValueProblem(f"{name} must be a positive int, got {value!r}")


def check_non_negative(name: str, value: Any) -> int:
    if _whole(value) and value >= 0:
        return int(value)
    raise ValueProblem(f"{name} must be an int >= 0, got {value!r}")


def check_switch(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueProblem(f"{name} must be True or False, got {value!r}")


def check_bytes(name: str, value: Any) -> int:
    if _whole(value) and value >= 0:
        return int(value)
    raise ValueProblem(f"{name} must be a number of bytes (an int >= 0), got {value!r}")


def check_tolerance(name: str, value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    raise ValueProblem(f"{name} must be a non-negative number, got {value!r}")


def check_mapping(name: str, value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping) and all(isinstance(key, str) for key in value):
        return dict(value)
    raise ValueProblem(f"{name} must be a dict of option name to value, got {value!r}")


def writable_dir_problem(path: Path, option: str) -> str:
    """What stops the run writing in ``path`` ("" when nothing), checked before any compile."""
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


@dataclass(frozen=True)
class ValueKind:
    """A kind of option value: ``parse`` turns command-line or ini text into it (raising
    ``argparse.ArgumentTypeError``), ``check`` takes a marker's or call's value (raising
    :attr:`Problem`). Give one to :func:`~pytest_aoti.api.per_check` as ``kind=``; a
    vocabulary (:meth:`words`) is one too."""

    parse: Callable[[str], Any]
    check: Callable[[str, Any], Any]

    SWITCH: ClassVar[ValueKind]
    """``on``/``off`` (true/false, yes/no, 1/0) on the command line; True or False in code."""
    COUNT: ClassVar[ValueKind]
    """A whole number, 1 or more."""
    NON_NEGATIVE: ClassVar[ValueKind]
    """A whole number, 0 or more."""
    BYTES: ClassVar[ValueKind]
    """A size: ``4GiB``, ``500M``, ``1024`` on the command line; an int of bytes in code."""
    CACHE_MODE: ClassVar[Words]
    """``off``, ``read`` or ``readwrite``."""

    Problem: ClassVar[type[ValueProblem]] = ValueProblem
    """What a ``check`` raises on a value it does not take (the message says what to write)."""

    @staticmethod
    def words(*words: str, quoted: bool = False) -> Words:
        """A vocabulary kind: the option takes one of ``words`` (case-insensitive); ``quoted``:
        a wrong value's message names them as strings (``'fail'``)."""
        return Words(*words, quoted=quoted)


ValueKind.SWITCH = ValueKind(parse_switch, check_switch)
ValueKind.COUNT = ValueKind(parse_positive_int, check_count)
ValueKind.NON_NEGATIVE = ValueKind(parse_non_negative_int, check_non_negative)
ValueKind.BYTES = ValueKind(parse_size, check_bytes)
ValueKind.CACHE_MODE = CACHE_MODES
