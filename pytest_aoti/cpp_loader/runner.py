"""The test process's one runner process (:file:`runner.cpp`): started at the first check that
needs it, asked one line at a time, each answer within a time limit; a runner that crashed or
hung is gone, and the next check starts another."""

from __future__ import annotations

import atexit
import time
from pathlib import Path

from pytest_aoti.api import LineChild
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
        self._child = LineChild("cpp-loader", CLOSE_WAIT)
        self._settings = ""
        self._settings_answer: Answer | None = None
        self._libraries: set[str] = set()

    @property
    def running(self) -> bool:
        return self._child.running

    def take_start_seconds(self) -> float | None:
        """The last start's seconds, once: the check that started the runner pays them."""
        seconds, self.start_seconds = self.start_seconds, None
        return seconds

    def ask(self, request: str, timeout: float) -> Answer:
        """Send one request line and read its answer; :class:`RunnerGone` if none comes."""
        if not self.running:
            self._start()
        if not self._child.write(request.encode()):
            raise RunnerGone(self._gone())
        line = self._child.line(timeout)
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
        started = time.perf_counter()
        try:
            self._child.start([str(self.binary)])
        except OSError as error:
            raise RunnerGone(f"the C++ loader's runner did not start: {error}") from None
        self._settings = ""
        self._settings_answer = None
        self._libraries = set()
        self.starts += 1
        line = self._child.line(START_SECONDS)
        if line is None:
            self.close()
            raise RunnerGone(f"the C++ loader's runner did not start within {START_SECONDS:.0f} s")
        if line.rstrip(b"\r\n").decode(errors="replace") != READY:
            raise RunnerGone(self._gone())
        self.start_seconds = time.perf_counter() - started

    def _gone(self) -> str:
        """Why the runner stopped (its exit and the last line it wrote); it is closed after."""
        code, tail = self._child.exit_and_last_line()
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
        self._child.close(wait=wait)


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
