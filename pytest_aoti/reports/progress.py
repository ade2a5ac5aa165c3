"""Compile progress: a line when a compile has lasted a while, another when it ends."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

PROGRESS_AFTER_SECONDS = 2.0
"""A compile is announced once it lasts this long."""


@dataclass
class CompileEvent:
    """A compile that this process announced (or would have, on an xdist worker)."""

    test: str
    program: str
    device: str
    seconds: float
    worker: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CompileEvent:
        return cls(
            test=str(data["test"]),
            program=str(data["program"]),
            device=str(data["device"]),
            seconds=float(data["seconds"]),
            worker=str(data.get("worker", "")),
        )


class CompileProgress:
    """The registry's ``CompileWatcher``: a timer thread writes "compiling ..." after
    :data:`PROGRESS_AFTER_SECONDS`, and an end line follows (``write``: a whole line outside
    capturing; without a terminal, an xdist worker's, events are only recorded)."""

    def __init__(self, write: Callable[[str], None] | None, *, worker: str = "") -> None:
        self._write = write
        self._worker = worker
        self._after = PROGRESS_AFTER_SECONDS
        self._lock = threading.Lock()
        self.events: list[CompileEvent] = []

    @contextlib.contextmanager
    def compiling(self, test: str, program: str, device: str) -> Iterator[None]:
        what = f"{test or 'a program'} (program {program[:12]}, {device})"
        announced = threading.Event()

        def announce() -> None:
            with self._lock:
                announced.set()
                self._emit(f"aoti: compiling {what} ...")

        timer = threading.Timer(self._after, announce)
        timer.daemon = True
        started = time.perf_counter()
        timer.start()
        ended = "failed"  # how a compile that did not finish ended
        try:
            yield
            ended = ""
        except KeyboardInterrupt:
            ended = "interrupted"  # Ctrl-C: the compile did not fail
            raise
        finally:
            timer.cancel()
            seconds = time.perf_counter() - started
            with self._lock:
                if announced.is_set() and ended:
                    self._emit(f"aoti: compiling {what} {ended} after {seconds:.1f} s")
                elif announced.is_set():
                    self._emit(f"aoti: compiled {what} in {seconds:.1f} s")
            if seconds >= self._after and not ended:
                self.events.append(CompileEvent(test, program, device, seconds, self._worker))

    def _emit(self, line: str) -> None:
        if self._write is not None:
            with contextlib.suppress(Exception):  # a progress line must never fail a compile
                self._write(line)


def write_own_line(reporter: Any, line: str) -> None:
    """Write ``line`` on a line of its own (after a newline where pytest left one open)."""
    reporter.ensure_newline()  # pytest's own: only where it wrote a file's name last
    writer = getattr(reporter, "_tw", None)
    if writer is not None and int(getattr(writer, "width_of_current_line", 0)):
        writer.line()
    reporter.write_line(line)


def worker_lines(events: Sequence[CompileEvent]) -> list[str]:
    """What each xdist worker compiled, for the terminal summary."""
    by_worker: dict[str, list[CompileEvent]] = {}
    for event in events:
        by_worker.setdefault(event.worker or "main", []).append(event)
    lines = []
    for worker in sorted(by_worker):
        done = by_worker[worker]
        total = sum(event.seconds for event in done)
        lines.append(f"{worker}: {len(done)} long compile(s), {total:.1f} s")
        lines += [
            f"    {event.seconds:6.1f} s  {event.program[:12]} {event.device}  {event.test}"
            for event in done
        ]
    return lines
