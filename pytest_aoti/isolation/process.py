"""The test process's one long-lived engine child (:mod:`.child`), running every program's jobs
so torch's import is paid once. A crash or hang ends that child only; a new one goes on with the
rest. It holds a program's engine from one request to the next until the check releases it;
it is replaced after :data:`PACKAGES_PER_CHILD` programs, or above :data:`MEMORY_CAP` once it
holds none. Requests and results go through the child's pipes, no file between (see
:mod:`.child`): a request is one line with its size and its ``torch.save``'d bytes; each job's
result comes back the same way as the job ends, so the jobs done before a crash or a hang keep
their results and the job after the last whole result is the one that crashed."""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Any

from pytest_aoti.isolation.line_child import LineChild

try:
    import fcntl
except ImportError:  # not on POSIX
    fcntl = None  # type: ignore[assignment]

PACKAGES_PER_CHILD = 32
"""Programs one child runs before a fresh one takes over."""

MEMORY_CAP = 2 * 2**30
"""Resident bytes, holding no engine, above which the child is replaced."""

CLOSE_WAIT = 0.2
"""Seconds the child may take to exit after its input ends before it is killed."""

STICKY_CUDA_ERROR = 70
"""The child's exit status after a CUDA error that poisons its process."""

HUNG = "the engine did not return within"
"""How the reason for a job past its time begins."""

_CHILD = Path(__file__).with_name("child.py")

Job = tuple[int, bool]
"""``(input set index, checked)``: one job of a request (see :mod:`.child`)."""


class PendingJobs:
    """``jobs`` of ``request`` started in the engine child within ``timeout`` seconds in all
    (``path`` first on the child's ``sys.path``): the child works on the request while this
    process goes on; :meth:`results` waits for it (and runs what a crash left on a new child).
    Until then the child takes no other request: every started request is waited for, or
    :meth:`discarded`."""

    def __init__(
        self,
        request: Mapping[str, Any],
        jobs: Sequence[Job],
        timeout: float,
        path: Sequence[str] = (),
        late: str = "not run: the time for these calls ran out",
    ) -> None:
        self._request = request
        self._path = path
        self._late = late
        self._deadline = time.monotonic() + timeout
        self._child = engine_child()
        self._remaining = list(jobs)
        self._unsent: str | None = None
        """Why the last request could not be sent (None: it was)."""
        self._send()

    def _send(self) -> None:
        left = max(1.0, self._deadline - time.monotonic())
        request = {**self._request, "jobs": self._remaining}
        self._unsent = self._child.send(request, self._path, left)
        child, timeout = self._child, max(1.0, self._deadline - time.monotonic())
        # read as the child writes it: the child never waits on a full pipe while this
        # process makes its own calls meanwhile
        self._reading: Future[tuple[list[Any], str | None]] | None = (
            _ANSWER_READER.submit(lambda: child.answer(timeout, _loaded))
            if self._unsent is None
            else None
        )

    def results(self) -> dict[Job, dict[str, Any]]:
        """Every job's result, once the child answered: a crashed or hung job has
        ``{"crashed": why, "signal": number or None}``, one the time left no room for
        ``{"crashed": late}``."""
        results: dict[Job, dict[str, Any]] = {}
        try:
            while self._remaining:
                why = self._unsent
                done: list[dict[str, Any]] = []
                if why is None and self._reading is not None:
                    done, why = self._reading.result()
                results.update(zip(self._remaining, done))
                if len(done) >= len(self._remaining):
                    break
                if why is None:
                    why = "the child process stopped without a result"
                results[self._remaining[len(done)]] = {
                    "crashed": why,
                    "signal": self._child.last_signal,
                }
                self._remaining = self._remaining[len(done) + 1 :]
                if time.monotonic() >= self._deadline:
                    for job in self._remaining:
                        results[job] = {"crashed": self._late}
                    break
                if self._remaining:
                    self._send()
        finally:
            self._remaining = []
        return results

    def discarded(self) -> None:
        """Wait for the child's answer and drop it (this process no longer needs it)."""
        with contextlib.suppress(Exception):
            self.results()


class _AnswerReader:
    """One daemon thread that reads the child's answers, one request at a time: started once,
    not per request (a thread's start costs a request more than its calls on a busy core)."""

    def __init__(self) -> None:
        self._asked: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, read: Callable[[], Any]) -> Future[Any]:
        answer: Future[Any] = Future()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._serve, name="pytest-aoti-child-answer", daemon=True
                )
                self._thread.start()
        self._asked.put((read, answer))
        return answer

    def _serve(self) -> None:
        while True:
            read, answer = self._asked.get()
            try:
                answer.set_result(read())
            except BaseException as error:  # handed to the thread that waits for the answer
                answer.set_exception(error)


_ANSWER_READER = _AnswerReader()


def _widen_pipe(stream: IO[bytes]) -> None:
    """Let the pipe hold as much as the system allows (1 MiB on Linux by default, against
    64 KiB): the child writes a request's answers while this process makes its own calls,
    and a full pipe would stop it until this process reads."""
    setting = getattr(fcntl, "F_SETPIPE_SZ", None)  # None without fcntl
    if setting is None:
        return
    try:
        size = int(Path("/proc/sys/fs/pipe-max-size").read_text())
        fcntl.fcntl(stream.fileno(), setting, size)
    except (OSError, ValueError):
        pass  # a smaller pipe only makes the child wait for this process


def _loaded(payload: bytes) -> dict[str, Any]:
    """A job's result from the bytes the child sent."""
    import torch  # torch loads on first use

    result: dict[str, Any] = torch.load(io.BytesIO(payload), weights_only=False, map_location="cpu")
    return result


class EngineChild:
    """The long-lived child: started on first use, replaced after a crash, a hang or a limit."""

    def __init__(self, script: Path) -> None:
        self.script = script
        self.starts = 0
        """Children started so far (one unless one crashed, hung or was replaced)."""
        self._child = LineChild("child", CLOSE_WAIT)
        self._stderr_start = 0
        """Where the running program's part of the child's stderr begins."""
        self._packages = 0
        self._unanswered: list[str] = []
        """What was asked without waiting (``preload``, ``release``), whose answer lines are
        still to be read, in order."""
        self._too_large = False
        """The child held more than :data:`MEMORY_CAP` after freeing its engine."""
        self._holding = False
        """An engine was asked for (a request or a preload) since the last release."""
        self.last_signal: int | None = None
        """The signal that ended the child during the last :meth:`run` (None: none did)."""

    def run(
        self, request: Mapping[str, Any], timeout: float, path: Sequence[str] = ()
    ) -> tuple[list[bytes], str | None]:
        """Have the child run ``request``'s jobs (``path`` first on its ``sys.path``): the
        results it sent, as in :meth:`answer`, and None when it answered, else why not (the
        child is then gone)."""
        why = self.send(request, path, timeout)
        return ([], why) if why is not None else self.answer(timeout)

    def send(
        self, request: Mapping[str, Any], path: Sequence[str] = (), timeout: float = 120.0
    ) -> str | None:
        """Ask the child to run ``request``'s jobs (a request of :mod:`.child`) without waiting
        (:meth:`answer` waits); None when asked, else why not (the child is then gone).
        ``timeout``: for the answers of earlier preloads and releases."""
        import torch  # torch loads on first use

        self.last_signal = None
        saved = io.BytesIO()  # saved before anything is written: a failed save asks nothing
        torch.save(dict(request), saved)
        if self._child.running:
            # an earlier preload or release unanswered ends that child, not this request
            answered = self._answered(timeout)
            if not answered or self._too_large or self._packages >= PACKAGES_PER_CHILD:
                self.close()  # what past programs' libraries and torch's heap keep grows
        if not self._child.running:
            self._start()
        # stderr holds earlier programs' lines: quote only this program's
        self._stderr_start = self._child.stderr_size()
        self._holding = True
        # the child reads the whole request before it answers: no wait on each other
        with saved.getbuffer() as payload:
            asked = {"request_bytes": payload.nbytes, "path": list(path)}
            written = self._child.write((json.dumps(asked) + "\n").encode(), payload)
        return None if written else self._failed()

    def answer(
        self, timeout: float, load: Callable[[bytes], Any] | None = None
    ) -> tuple[list[Any], str | None]:
        """Wait for the answer to the request :meth:`send` asked, ``timeout`` seconds in all:
        the result of each job the child finished, in order (its ``torch.save``'d bytes,
        passed through ``load`` as it arrives), and None when the child answered every job,
        else why not (the child is then gone; the job after the last result is the one it
        died in)."""
        deadline = time.monotonic() + timeout
        results: list[Any] = []
        try:
            while True:
                line = self._child.line(deadline - time.monotonic())
                if line is None:
                    self.close()
                    return results, f"{HUNG} {timeout:.0f} s"
                answer = _parsed(line)
                if answer.get("done"):
                    return results, None
                size = answer.get("bytes")
                if answer.get("job") != len(results) or not isinstance(size, int) or size < 0:
                    return results, self._failed()
                payload = self._child.exactly(size, deadline - time.monotonic())
                if payload is None:
                    self.close()
                    return results, f"{HUNG} {timeout:.0f} s"
                if len(payload) < size:  # the child died while writing it: no result
                    return results, self._failed()
                results.append(payload if load is None else load(payload))
        except BaseException:
            self.close()  # an answer read in part: the child's next one would be misread
            raise

    def prestart(self) -> None:
        """Start the child now (it imports torch while this process compiles), unless running."""
        if self._packages >= PACKAGES_PER_CHILD:
            self.close()  # replaced now rather than at the first request
        if not self._child.running:
            self._start()

    def preload(self, package: Path, device_index: int | None) -> None:
        """Have a running child load ``package``'s engine now, without waiting for it: the
        next request finds it loaded."""
        if not self._child.running:
            return
        asked = {"preload": str(package), "device_index": device_index}
        if self._say(asked):
            self._unanswered.append("preload")
            self._holding = True

    def release(self) -> None:
        """Have a running child free the engine it holds (and its weights), without waiting:
        its answer is read before the next request; nothing where no engine was asked for
        since the last release (so unread answers never pile up)."""
        if not self._child.running or not self._holding:
            return
        self._holding = False
        self._packages += 1
        if self._packages >= PACKAGES_PER_CHILD:
            self.close()  # what past programs' libraries and torch's heap keep grows
        elif self._say({"release": True}):
            self._unanswered.append("release")

    def _say(self, asked: Mapping[str, Any]) -> bool:
        """Write one request line; False (the child is gone) if it cannot be written."""
        if self._child.write((json.dumps(asked) + "\n").encode()):
            return True
        self.close()
        return False

    def _answered(self, timeout: float = 120.0) -> bool:
        """Read the answers of earlier preloads; False (the child is gone) if one is missing."""
        while self._unanswered:
            line = self._child.line(timeout)
            if line is None or not line.endswith(b"\n"):  # late, or the child ended
                self.close()
                return False
            if self._unanswered.pop(0) == "release":
                try:
                    rss = int(json.loads(line).get("rss") or 0)
                except (ValueError, AttributeError):
                    rss = MEMORY_CAP + 1
                self._too_large = rss > MEMORY_CAP
        return True

    def _start(self) -> None:
        env = dict(os.environ)
        env.pop("AOTI_RUNTIME_CHECK_INPUTS", None)
        # the child only loads packages built on this machine: skip the ISA probe's compile
        env.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")
        process = self._child.start([sys.executable, str(self.script), "--serve"], env)
        assert process.stdout is not None and process.stdin is not None
        for stream in (process.stdout, process.stdin):
            _widen_pipe(stream)
        self._packages = 0
        self._unanswered = []
        self._too_large = False
        self._holding = False
        self.starts += 1

    def _failed(self) -> str:
        """Why the child stopped without an answer; the child is gone after it."""
        code, tail = self._child.exit_and_last_line(self._stderr_start)
        self.close()
        if code is not None and code < 0:
            self.last_signal = -code
            return f"the engine crashed the process (signal {-code})"
        if code == STICKY_CUDA_ERROR:
            return f"the engine hit a CUDA error that sticks to its process: {tail or code}"
        return f"the probe process failed: {tail or code}"

    def close(self, *, wait: bool = True) -> None:
        """End the child: end of input first, then a kill if it does not exit. ``wait``:
        return once it has ended (else a thread of its own waits for it: the child frees
        its engine and exits while this process ends)."""
        # it holds nothing to save: a child slow to tear torch down is ended
        self._child.close(wait=wait)


def _parsed(line: bytes) -> dict[str, Any]:
    """An answer line's JSON object; empty where the line is none (cut short or garbled)."""
    if not line.endswith(b"\n"):
        return {}
    try:
        parsed = json.loads(line)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


_PROCESS: EngineChild | None = None


def engine_child() -> EngineChild:
    """This process's engine child (see :class:`EngineChild`)."""
    global _PROCESS
    if _PROCESS is None or _PROCESS.script != _CHILD:
        if _PROCESS is not None:
            _PROCESS.close()
        _PROCESS = EngineChild(_CHILD)
        atexit.register(_PROCESS.close)
    return _PROCESS


def side_by_side() -> bool:
    """Whether the engine child may make its calls while this process makes its own: the
    cores this process may use hold both processes' torch threads. Where they do not, each
    process's parallel regions would wait on threads the other keeps busy, and the two
    run one after the other instead."""
    import torch

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return cores >= 2 * torch.get_num_threads()


def prestart_engine_child() -> None:
    """Start this process's engine child ahead of its first request (during a compile)."""
    engine_child().prestart()


def preload_engine(package: Path, device_index: int | None) -> None:
    """Have this process's engine child, if it runs, load ``package`` ahead of its requests."""
    if _PROCESS is not None:
        _PROCESS.preload(package, device_index)


def release_engine() -> None:
    """Free the engine this process's child holds, if it runs (a check is done with it)."""
    if _PROCESS is not None:
        _PROCESS.release()


def shutdown() -> None:
    """End this process's engine child, if there is one (at the end of the session)."""
    global _PROCESS
    if _PROCESS is not None:
        _PROCESS.close(wait=False)  # its engine's teardown need not hold up the session's end
        _PROCESS = None
