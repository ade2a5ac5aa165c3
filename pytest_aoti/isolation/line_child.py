"""A child process asked on its stdin that answers in lines on its stdout (and the bytes a line
announces), its stderr kept in a file for the line that says why it stopped: the engine child
(:mod:`.process`) and the C++ loader's runner are both one."""

from __future__ import annotations

import contextlib
import io
import os
import selectors
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from typing import IO


class LineChild:
    """One child at a time: :meth:`start` ends the one before. Only the process that started
    it ends it (a forked copy of that process never does)."""

    def __init__(self, name: str, close_wait: float) -> None:
        self.name = name
        """Names its stderr file and the thread that waits for its end."""
        self.close_wait = close_wait
        """Seconds it may take to exit after its input ends before it is killed."""
        self.process: subprocess.Popen[bytes] | None = None
        self.stderr: IO[bytes] | None = None
        self._reader: _LineReader | None = None
        self._owner = os.getpid()

    @property
    def running(self) -> bool:
        """Whether a started child has not exited."""
        return self.process is not None and self.process.poll() is None

    def start(
        self, command: Sequence[str], env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``command`` (the one before ended first); :class:`OSError` where it cannot."""
        self.close()
        self.stderr = tempfile.TemporaryFile(prefix=f"pytest-aoti-{self.name}-")
        try:
            self.process = subprocess.Popen(
                list(command),
                env=None if env is None else dict(env),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.stderr,
            )
        except OSError:
            self.close()
            raise
        self._owner = os.getpid()
        assert self.process.stdout is not None
        self._reader = _LineReader(self.process.stdout)
        return self.process

    def write(self, *chunks: bytes | memoryview) -> bool:
        """Write ``chunks`` to the child's input and flush; False where the child is gone."""
        process = self.process
        if process is None or process.stdin is None:
            return False
        try:
            for chunk in chunks:
                process.stdin.write(chunk)
            process.stdin.flush()
        except OSError:
            return False
        return True

    def line(self, timeout: float) -> bytes | None:
        """The next line within ``timeout`` seconds (None on a timeout; partial at its end)."""
        assert self._reader is not None, "read from a child that is not started"
        return self._reader.line(timeout)

    def exactly(self, size: int, timeout: float) -> bytes | None:
        """The next ``size`` bytes within ``timeout`` seconds (None on a timeout, what came
        kept for the next read; fewer at the pipe's end)."""
        assert self._reader is not None, "read from a child that is not started"
        return self._reader.exactly(size, timeout)

    def stderr_size(self) -> int:
        """Bytes the child wrote to its stderr so far."""
        return os.fstat(self.stderr.fileno()).st_size if self.stderr is not None else 0

    def exit_and_last_line(self, start: int = 0) -> tuple[int | None, str]:
        """Why the child stopped answering, as far as it tells: its exit status (None where
        it has not exited within five seconds) and the last line it wrote to its stderr from
        byte ``start`` on."""
        assert self.process is not None and self.stderr is not None  # both set by start()
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        self.stderr.seek(start)
        lines = self.stderr.read().decode(errors="replace").strip().splitlines()
        return code, lines[-1] if lines else ""

    def close(self, *, wait: bool = True) -> None:
        """End the child: the end of its input, then a kill where it has not exited within
        :attr:`close_wait`. ``wait``: return once it has ended (else a daemon thread waits
        for it: the child frees what it holds and exits while this process goes on)."""
        process, self.process = self.process, None
        self._reader = None  # its pipe is closed: a later read fails, never reads another's
        if process is not None and self._owner == os.getpid():
            if wait:
                _end(process, self.close_wait)
            else:
                threading.Thread(
                    target=_end,
                    args=(process, self.close_wait),
                    name=f"pytest-aoti-{self.name}-end",
                    daemon=True,
                ).start()
        if self.stderr is not None:
            self.stderr.close()
            self.stderr = None


def _end(process: subprocess.Popen[bytes], wait: float) -> None:
    if process.stdin is not None:
        with contextlib.suppress(OSError):
            process.stdin.close()
    try:
        process.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if process.stdout is not None:
        process.stdout.close()


class _LineReader:
    """Lines of a pipe, and the bytes a line announces, each within a deadline: what one read
    brings past a line's end is kept for the next read (answers written without waiting
    arrive together)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.fd = stream.fileno()
        self._buffered = b""

    def line(self, timeout: float) -> bytes | None:
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.fd, selectors.EVENT_READ)
            while b"\n" not in self._buffered:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    return None
                chunk = os.read(self.fd, 4096)
                if not chunk:
                    data, self._buffered = self._buffered, b""
                    return data
                self._buffered += chunk
        line, _, self._buffered = self._buffered.partition(b"\n")
        return line + b"\n"

    def exactly(self, size: int, timeout: float) -> bytes | None:
        if len(self._buffered) >= size:
            data, self._buffered = self._buffered[:size], self._buffered[size:]
            return data
        deadline = time.monotonic() + timeout
        # grown in place and handed over by getvalue: a large payload is held once
        whole = io.BytesIO()
        whole.write(self._buffered)
        self._buffered = b""
        with selectors.DefaultSelector() as selector:
            selector.register(self.fd, selectors.EVENT_READ)
            while (got := whole.tell()) < size:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    self._buffered = whole.getvalue()
                    return None
                chunk = os.read(self.fd, min(size - got, 2**20))
                if not chunk:
                    break
                whole.write(chunk)
        return whole.getvalue()
