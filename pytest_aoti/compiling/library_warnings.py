"""Warnings raised while pytest-aoti exports and compiles: whose are they?

A warning that torch (or the model's library) raises from its own frames while the plugin
exports, decomposes or compiles is about torch, not about the user's code: under
``filterwarnings = error`` it would fail a correct check. Such warnings are recorded and
shown in the terminal summary and the JSON report. A warning raised from the user's own
code is issued again at its own file and line, so the user's filters decide, as always.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import sysconfig
import types
import warnings
from collections.abc import Callable, Iterator

# torch's notes about its own deprecations: not worth a line in the summary
_QUIET = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)
_INSTALLED = re.compile(r"[/\\](site|dist)-packages[/\\]")


@contextlib.contextmanager
def library_warnings_recorded(note: Callable[[str], None]) -> Iterator[None]:
    """Record warnings raised inside the block: library ones go to ``note`` as one line
    each, user ones are re-issued with :func:`warnings.warn_explicit` after the block."""
    from pytest_aoti.frames import is_library_file

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
        # a warning raised with a stacklevel that lands in Python's own frames (a
        # contextlib.py line) is said where the library that raised it is
        item.filename, item.lineno = heard_at.get(id(item), (item.filename, item.lineno))
        # torch, Python, or an installed package (the model's library): not the user's code
        if is_library_file(item.filename) or _INSTALLED.search(item.filename):
            if not issubclass(item.category, _QUIET) and not _ignored(item):
                first = str(item.message).strip().splitlines()
                text = first[0] if first else ""
                note(f"{item.category.__name__} from {item.filename}:{item.lineno}: {text}")
            continue
        warnings.warn_explicit(
            item.message, item.category, item.filename, item.lineno, source=item.source
        )


def _note_where_heard(
    caught: list[warnings.WarningMessage], heard_at: dict[int, tuple[str, int]]
) -> None:
    """Record each warning inside ``catch_warnings(record=True)`` with, where its own
    location is Python's (``contextlib.py``), the innermost frame of the stack outside
    Python's files: the library's line that raised it."""
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
    """Whether ``file`` is one of Python's own modules (not an installed package's)."""
    stdlib = sysconfig.get_paths()["stdlib"]
    path = os.path.abspath(file)
    return path.startswith(stdlib + os.sep) and "-packages" not in path


def _ignored(item: warnings.WarningMessage) -> bool:
    """Whether the user's filters ignore this warning (then it is no note either)."""
    import os

    text = str(item.message)
    names = (
        os.path.splitext(item.filename)[0],
        os.path.splitext(os.path.basename(item.filename))[0],
    )
    for action, message, category, module, lineno in warnings.filters:
        if message is not None and not message.match(text):
            continue
        if not issubclass(item.category, category):
            continue
        if module is not None and not any(module.match(name) for name in names):
            continue
        if lineno and lineno != item.lineno:
            continue
        return bool(action == "ignore")
    return False
