"""One boundary around every call to the fleet's store: an answer within a deadline, or a
:class:`RemoteFault` that says what happened.

Each call runs in a daemon thread that the caller waits for with a timeout, so a store
that never answers (a FIFO read, a stalled socket, a custom filesystem that sleeps) costs
the deadline and nothing more: the thread is abandoned, and being a daemon it never holds
up the interpreter at exit (no executor joins it). Any exception the call raises, of any
type, comes back as a :class:`RemoteFault`; a missing file as :class:`RemoteMissing`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from pytest_aoti.fleet.redact import redact

__all__ = ["RemoteFault", "RemoteMissing", "bounded"]

_T = TypeVar("_T")


class RemoteFault(Exception):
    """A store call failed or passed its deadline; ``str()`` is one line for the user."""

    def __init__(self, message: str, *, timed_out: bool = False, denied: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out
        self.denied = denied
        """Retrying changes nothing (a permission error)."""


class RemoteMissing(Exception):
    """The store has no such file: a miss, not a fault."""


def describe(error: BaseException) -> str:
    """``TypeName: first line`` of ``error``, credentials masked, at most 200 characters."""
    try:
        first = (str(error).splitlines() or [""])[0]
    except Exception:  # a hostile __str__ must not escape either
        first = ""
    name = type(error).__name__
    return redact(f"{name}: {first[:200]}" if first else name)


def bounded(function: Callable[..., _T], *args: Any, seconds: float) -> _T:
    """``function(*args)``, run in a daemon thread and waited for at most ``seconds``.

    Raises :class:`RemoteMissing` for ``FileNotFoundError`` and :class:`RemoteFault` for
    anything else it raises (``BaseException`` included: a client's ``SystemExit`` or a
    ``RecursionError`` is a fault of the store, not of the test) or when the deadline
    passes.
    """
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = function(*args)
        except BaseException as error:  # reported by the caller, in the caller's thread
            outcome["error"] = error
        finally:
            done.set()

    worker = threading.Thread(target=run, name="pytest-aoti-remote", daemon=True)
    worker.start()
    if not done.wait(seconds):
        raise RemoteFault(f"no answer within {seconds:g} s", timed_out=True)
    error = outcome.get("error")
    if error is None:
        return outcome["value"]  # type: ignore[no-any-return]
    if isinstance(error, FileNotFoundError):
        raise RemoteMissing(describe(error))
    raise RemoteFault(describe(error), denied=isinstance(error, PermissionError))
