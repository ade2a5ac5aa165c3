"""Warnings raised while pytest-aoti exports and compiles: a library's own is recorded for the
summary and report (under ``filterwarnings = error`` it would fail a correct check); one from the
user's code is issued again at its own line, for the user's filters."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import sysconfig
import types
import warnings
from collections.abc import Callable, Iterator

from pytest_aoti.frames import is_library_file

# torch's notes about its own deprecations: not worth a line in the summary
_QUIET = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)
_INSTALLED = re.compile(r"[/\\](site|dist)-packages[/\\]")


@contextlib.contextmanager
def library_warnings_recorded(note: Callable[[str], None]) -> Iterator[None]:
    """Library warnings in the block go to ``note``; user ones are re-issued after it."""
    heard_at: dict[int, tuple[str, int]] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _note_where_heard(caught, heard_at)
        try:
            yield
        finally:
            # restored below, after catch_warnings puts the user's filters back
            recorded = list(caught)
    for item in recorded:
        # a stacklevel landing in Python's frames (contextlib.py) is said at the library's line
        item.filename, item.lineno = heard_at.get(id(item), (item.filename, item.lineno))
        # torch, Python, or an installed package (the model's library): not the user's code
        if is_library_file(item.filename) or _INSTALLED.search(item.filename):
            if not issubclass(item.category, _QUIET) and not _ignored(item):
                text = (str(item.message).strip().splitlines() or [""])[0]
                note(f"{item.category.__name__} from {item.filename}:{item.lineno}: {text}")
            continue
        warnings.warn_explicit(
            item.message, item.category, item.filename, item.lineno, source=item.source
        )


def _note_where_heard(
    caught: list[warnings.WarningMessage], heard_at: dict[int, tuple[str, int]]
) -> None:
    """Record warnings located in ``contextlib.py`` at the innermost frame outside Python's."""
    if not hasattr(warnings, "_showwarnmsg_impl"):
        return  # the location stays the warning's own

    def record(message: warnings.WarningMessage) -> None:
        caught.append(message)
        if not _is_python_file(message.filename):
            return
        frame: types.FrameType | None = sys._getframe(1)
        while frame is not None:
            name = frame.f_code.co_filename
            if not _is_python_file(name) and not name.startswith("<"):
                heard_at[id(message)] = (name, frame.f_lineno)
                return
            frame = frame.f_back

    warnings._showwarnmsg_impl = record  # catch_warnings restores it


def _is_python_file(file: str) -> bool:
    stdlib = sysconfig.get_paths()["stdlib"]
    path = os.path.abspath(file)
    return path.startswith(stdlib + os.sep) and "-packages" not in path


def _ignored(item: warnings.WarningMessage) -> bool:
    """Whether the user's filters ignore this warning (then it is no note either)."""
    text = str(item.message)
    names = (
        os.path.splitext(item.filename)[0],
        os.path.splitext(os.path.basename(item.filename))[0],
    )
    for action, message, category, module, lineno in warnings.filters:
        if (
            (message is None or message.match(text))
            and issubclass(item.category, category)
            and (module is None or any(module.match(name) for name in names))
            and (not lineno or lineno == item.lineno)
        ):
            return bool(action == "ignore")
    return False
