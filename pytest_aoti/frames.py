"""Which code is the user's: source files, tracebacks and the caller of a warning, with one
answer for every part of the plugin. Imports nothing of pytest-aoti, and torch never."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import sysconfig
import types
from collections.abc import Callable

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
"""The ``pytest_aoti`` folder."""

# torch and the packages it brings along, which no model is written in
LIBRARY_PACKAGES = ("torch", "functorch", "torchgen", "sympy", "mpmath", "triton")

_LIBRARY_PATH = re.compile(
    r"[/\\](site|dist)-packages[/\\](" + "|".join(LIBRARY_PACKAGES) + r")[/\\]"
)
_CONTEXTLIB = os.path.abspath(contextlib.__file__)
FILE_LINE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>[^\s,]+)')
"""A frame as a traceback quotes it: ``File "...", line N, in function``."""


def is_own_file(file: str) -> bool:
    """Whether ``file`` is a module of pytest-aoti."""
    return os.path.abspath(file).startswith(PACKAGE_DIR + os.sep)


def is_library_file(file: str) -> bool:
    """Whether ``file`` belongs to torch, its dependencies, pytest-aoti or Python; the rest (the
    model, the test, its libraries such as transformers) is the user's."""
    if file.startswith("<") or _LIBRARY_PATH.search(file):
        return True
    path = os.path.abspath(file)
    if path.startswith(PACKAGE_DIR + os.sep):
        return True
    for name in LIBRARY_PACKAGES:
        location = getattr(sys.modules.get(name), "__file__", None)
        if location and path.startswith(os.path.dirname(os.path.abspath(location)) + os.sep):
            return True
    stdlib = sysconfig.get_paths()["stdlib"]
    return path.startswith(stdlib + os.sep) and "site-packages" not in path


def is_user_file(file: str) -> bool:
    """Whether ``file`` is the user's code (see :func:`is_library_file`)."""
    return not is_library_file(file)


def quoted_frames(
    text: str, *, keep: Callable[[str], bool] = is_user_file
) -> list[tuple[str, int, str]]:
    """``(file, line, function)`` of each frame quoted in ``text`` that ``keep`` takes, in order."""
    frames = []
    for line in text.splitlines():
        match = FILE_LINE.match(line)
        if match and keep(match["file"]):
            frames.append((match["file"], int(match["line"]), match["func"]))
    return frames


def user_traceback(error: BaseException) -> list[types.TracebackType]:
    """The entries of ``error``'s traceback that run the user's code, outermost first."""
    entries = []
    tb = error.__traceback__
    while tb is not None:
        if is_user_file(tb.tb_frame.f_code.co_filename):
            entries.append(tb)
        tb = tb.tb_next
    return entries


def pin_to_source(error: BaseException) -> None:
    """Cut the tracebacks of ``error`` and its chain to the innermost user frame (or to nothing),
    so pytest shows a torch error at the model's line, not through dozens of torch frames."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        tb = next(reversed(user_traceback(current)), None)
        current.__traceback__ = (
            types.TracebackType(None, tb.tb_frame, tb.tb_lasti, tb.tb_lineno) if tb else None
        )
        if current.__cause__ is not None:
            current = current.__cause__
        elif not current.__suppress_context__:
            current = current.__context__
        else:
            current = None


def caller_stacklevel(skip: Callable[[str], bool] = is_own_file) -> int:
    """The ``stacklevel`` for ``warnings.warn`` naming the first frame out from the caller whose
    file ``skip`` rejects (default: the first line outside pytest-aoti and :mod:`contextlib`)."""
    level, frame = 1, sys._getframe(1)
    while frame is not None:
        file = frame.f_code.co_filename
        if not (skip(file) or os.path.abspath(file) == _CONTEXTLIB):
            break
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level
