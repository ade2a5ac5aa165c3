"""Errors and warnings raised by pytest-aoti.

Every error carries a short first line that says what went wrong and, where the user
can act, what to try. Internal torch tracebacks are never chained onto them.
"""

from __future__ import annotations


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
