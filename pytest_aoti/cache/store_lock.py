"""The store's per-key cross-process locks (``locks/<key>.lock``): one worker compiles, the
others wait and load. A holder stuck past :data:`LOCK_TIMEOUT` costs the others a problem line
and their own compile."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from pytest_aoti.cache.store_files import FILE_MODE

__all__ = ["LOCK_TIMEOUT", "KeyLocks"]

LOCK_TIMEOUT = 120.0
"""Seconds a lock is waited for by default: longer than a small model's compile."""


class KeyLocks:
    """The locks of one store's keys, in ``directory``; problems go to ``warn``."""

    def __init__(self, directory: Path, warn: Callable[[str], None]) -> None:
        self._directory = directory
        self._warn = warn

    def _path(self, key: str) -> Path:
        return self._directory / f"{key}.lock"

    @contextlib.contextmanager
    def held(self, key: str, timeout: float | None = None) -> Iterator[None]:
        """Hold ``key``'s lock, or go on without it (reported) after ``timeout`` seconds."""
        wait = LOCK_TIMEOUT if timeout is None else timeout
        lock = FileLock(self._path(key), timeout=wait, mode=FILE_MODE)
        acquired = self._acquire(lock, key, wait)
        try:
            yield
        finally:
            if acquired:
                lock.release()

    def _acquire(self, lock: FileLock, key: str, timeout: float) -> bool:
        try:
            lock.acquire()
        except Timeout:
            self._warn(
                f"pytest-aoti waited {timeout:g} s for the cache lock of {key}; going on without it"
            )
            return False
        except OSError as e:
            self._warn(
                f"pytest-aoti could not take the cache lock of {key}: {e}; going on without it"
            )
            return False
        return True

    def is_locked(self, key: str) -> bool:
        """Whether some process (this one included) holds ``key``'s lock right now."""
        probe = FileLock(self._path(key), timeout=0, mode=FILE_MODE)
        try:
            probe.acquire()
        except (Timeout, OSError):
            return True
        probe.release()
        return False
