"""Errors and warnings raised by pytest-aoti.

Every error carries a short first line that says what went wrong and, where the user
can act, what to try. Internal torch tracebacks are never chained onto them.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any, TypeVar


class AotiError(Exception):
    """Base class of every pytest-aoti error."""


class AotiCheckError(AotiError, AssertionError):
    """The AOTInductor engine disagreed with eager PyTorch or with what the test expected.

    The first line names what differed and where (pytree path, input name, call number,
    sample number); the following lines give the figures.
    """


class AotiExportError(AotiError):
    """``torch.export.export`` refused the module."""


class AotiCompileError(AotiError):
    """``aoti_compile_and_package`` or ``aoti_load_package`` failed."""


class AotiUsageError(AotiError, TypeError):
    """A fixture, marker or check argument was used the wrong way."""


class AotiInputError(AotiError, ValueError):
    """An input does not fit the shapes, dtypes or devices the program was exported for."""


class AotiBufferMutationWarning(UserWarning):
    """The program mutates registered buffers.

    Buffers are state shared by every caller of one engine: two threads running the same
    engine race on them. Passing the state as an input that the program mutates is
    thread-safe instead.
    """


class AotiCacheWarning(UserWarning):
    """The artifact cache could not be used as configured; the run goes on without it."""


_F = TypeVar("_F", bound=Callable[..., Any])
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def warn_at_caller(warning: Warning) -> None:
    """Issue ``warning`` at the first frame outside pytest-aoti: the user's own line."""
    level, frame = 2, sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    warnings.warn(warning, stacklevel=level)


def user_facing(function: _F) -> _F:
    """Let an :class:`AotiError` leave a public entry point with only the caller's frame.

    The frames below (pipeline, registry, comparison, torch) explain nothing to a user
    whose model failed a check; the error's message carries what matters.
    """

    @functools.wraps(function)
    def entry_point(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        try:
            return function(*args, **kwargs)
        except AotiError as error:
            raise error.with_traceback(None) from None

    return entry_point  # type: ignore[return-value]
