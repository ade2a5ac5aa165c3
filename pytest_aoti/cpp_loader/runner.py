"""The test process's one runner process (:file:`runner.cpp`): started at the first check that
needs it, asked one line at a time, each answer within a time limit; a runner that crashed or
hung is gone, and the next check starts another."""

from __future__ import annotations

import atexit
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO

from pytest_aoti.api import LineReader, end_process, exit_and_last_line
from pytest_aoti.cpp_loader.protocol import READY, Answer, ProtocolError, parse_answer

START_SECONDS = 60.0
"""Seconds the runner may take to load torch's libraries and say it is ready."""
CLOSE_WAIT = 2.0
"""Seconds the runner may take to exit after its input ends before it is killed."""


class RunnerGone(Exception):
    """The runner did not answer: it crashed, hung or could not start (the message says)."""


class LoaderProcess:
    """One running runner: its pipes, what it was set to, the libraries it loaded."""

    def __init__(self, binary: Path) -> None:
        self.binary = binary
        self.starts = 0
        self.start_seconds: float | None = None
        """Seconds the last start took, until a check takes them as its cost."""
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._reader: LineReader | None = None
        self._owner = os.getpid()
        self._settings = ""
        self._settings_answer: Answer | None = None
        self._libraries: set[str] = set()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def take_start_seconds(self) -> float | None:
        """The last start's seconds, once: the check that started the runner pays them."""
        seconds, self.start_seconds = self.start_seconds, None
        return seconds

    def ask(self, request: str, timeout: float) -> Answer:
        """Send one request line and read its answer; :class:`RunnerGone` if none comes."""
        if not self.running:
            self._start()
        process = self._process
        assert process is not None and process.stdin is not None
        try:
            process.stdin.write(request.encode())
            process.stdin.flush()
        except OSError:
            raise RunnerGone(self._gone()) from None
        line = self._line(timeout)
        if line is None:
            self.close()
            raise RunnerGone(f"the C++ loader's runner did not answer within {timeout:.0f} s")
        if not line.endswith(b"\n"):
            raise RunnerGone(self._gone())
        try:
            return parse_answer(line)
        except ProtocolError as error:
            self.close()
            raise RunnerGone(str(error)) from None

    def configure(self, request: str, timeout: float) -> Answer:
        """Send a ``set`` request unless the running runner was already set so; its answer."""
        if self.running and request == self._settings and self._settings_answer is not None:
            return self._settings_answer
        answer = self.ask(request, timeout)
        self._settings, self._settings_answer = (request, answer) if answer.ok else ("", None)
        return answer

    def load_library(self, request: str, path: str, timeout: float) -> Answer | None:
        """Load a custom-op library unless the running runner already has; None if it has."""
        if self.running and path in self._libraries:
            return None
        answer = self.ask(request, timeout)
        if answer.ok:
            self._libraries.add(path)
        return answer

    def _start(self) -> None:
        self.close()
        self._stderr = tempfile.TemporaryFile(prefix="pytest-aoti-cpp-loader-")
        started = time.perf_counter()
        try:
            self._process = subprocess.Popen(
                [str(self.binary)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
            )
        except OSError as error:
            self.close()
            raise RunnerGone(f"the C++ loader's runner did not start: {error}") from None
        self._owner = os.getpid()
        assert self._process.stdout is not None
        self._reader = LineReader(self._process.stdout)
        self._settings = ""
        self._settings_answer = None
        self._libraries = set()
        self.starts += 1
        line = self._line(START_SECONDS)
        if line is None:
            self.close()
            raise RunnerGone(f"the C++ loader's runner did not start within {START_SECONDS:.0f} s")
        if line.rstrip(b"\r\n").decode(errors="replace") != READY:
            raise RunnerGone(self._gone())
        self.start_seconds = time.perf_counter() - started

    def _line(self, timeout: float) -> bytes | None:
        """The next line within ``timeout`` seconds (None on a time-out; partial at the end)."""
        assert self._reader is not None
        return self._reader.line(timeout)

    def _gone(self) -> str:
        """Why the runner stopped (its exit and the last line it wrote); it is closed after."""
        assert self._process is not None
        code, tail = exit_and_last_line(self._process, self._stderr)
        tail = tail.strip()
        self.close()
        how = (
            f"crashed (signal {-code})"
            if code is not None and code < 0
            else f"exited (status {code})"
            if code is not None
            else "stopped"
        )
        return f"the C++ loader's runner {how}" + (f": {tail}" if tail else "")

    def close(self, *, wait: bool = True) -> None:
        """End the runner: end of input, then a kill if it does not exit. ``wait``: return
        once it has ended (else a thread of its own waits: the runner frees its engine and
        exits while this process goes on)."""
        process, self._process = self._process, None
        if process is not None and self._owner == os.getpid():
            end_process(process, CLOSE_WAIT, background=None if wait else "pytest-aoti-runner-end")
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


_PROCESS: LoaderProcess | None = None
_ENDED_AT_EXIT: list[bool] = []


def loader_process(binary: Path) -> LoaderProcess:
    """This process's runner of ``binary`` (another binary's runner is ended)."""
    global _PROCESS
    if _PROCESS is None or _PROCESS.binary != binary:
        if _PROCESS is not None:
            _PROCESS.close()
        if not _ENDED_AT_EXIT:
            _ENDED_AT_EXIT.append(True)
            atexit.register(shutdown)
        _PROCESS = LoaderProcess(binary)
    return _PROCESS


def shutdown(*, wait: bool = True) -> None:
    """End this process's runner, if there is one (at the end of the session); ``wait``:
    as :meth:`LoaderProcess.close`."""
    global _PROCESS
    if _PROCESS is not None:
        _PROCESS.close(wait=wait)
        _PROCESS = None
