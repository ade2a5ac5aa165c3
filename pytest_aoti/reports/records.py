"""Reporting: one record per ``aoti.check``, the terminal table, the JSON report, JUnit
properties, the header lines and the compile progress lines.

The session collects :class:`CheckRecord` objects (from this process and, under xdist,
from the workers); everything a user reads about checks is rendered here from them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from importlib import metadata, util
from pathlib import Path
from typing import Any

REPORT_VERSION = 1

PROGRESS_AFTER_SECONDS = 2.0
"""A compile, or a wait on another worker's compile, is announced once it lasts this long."""


@dataclass
class CheckRecord:
    """What one ``aoti.check`` call did and measured."""

    test: str
    """The pytest node id."""
    device: str
    program: str
    """The program's content key."""
    cache_hit: bool
    compile_seconds: float
    """Seconds this check spent compiling: 0 on a cache hit or a program compiled earlier
    in the session."""
    original_compile_seconds: float
    """Seconds the compile that produced the package took, whenever that was."""
    outcome: str = "passed"
    """``passed`` or ``failed``."""
    max_abs: float | None = None
    max_rel: float | None = None
    tolerance_used: float | None = None
    """The worst leaf's error as a fraction of what its tolerance allowed (1 = at the limit)."""
    shapes_tried: int = 0
    """Input sets checked: the example, samples, boundary and generated shapes."""
    calls: int = 1
    engine_seconds: float | None = None
    """Median wall time of one engine call, after the first."""
    eager_seconds: float | None = None
    """Median wall time of one eager call, after the first."""
    profile: str | None = None
    """The Chrome trace written for this check (``--aoti-profile``)."""
    finding: dict[str, Any] | None = None
    """For a failure: the finding (kind, stage, node, figures)."""
    check_seconds: float = 0.0
    """Wall time of the whole check, compile included."""
    worker: str = ""
    """The xdist worker that ran the check (``gw0``); empty without xdist."""
    extra_bytes: int | None = None
    """With ``max_extra_bytes``: the most device memory one engine call allocated."""
    extra_bytes_unmeasured: bool = False
    """``max_extra_bytes`` was asked for on a device whose memory is not measured (CPU)."""
    probes: list[dict[str, Any]] = field(default_factory=list)
    """Deployment probes of the program: ``input``, ``variant``, ``outcome``, ``max_abs``,
    ``max_rel``, ``refused_with_checks``, ``remedy`` per variant."""

    @property
    def speed_ratio(self) -> float | None:
        """Engine time over eager time per call: below 1, the engine is faster."""
        if not self.engine_seconds or not self.eager_seconds:
            return None
        return self.engine_seconds / self.eager_seconds

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["engine_over_eager"] = self.speed_ratio
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CheckRecord:
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{key: value for key, value in data.items() if key in names})

    def properties(self) -> list[tuple[str, Any]]:
        """JUnit properties (``--junitxml``) of this check."""
        props: list[tuple[str, Any]] = [
            ("aoti_device", self.device),
            ("aoti_program", self.program),
            ("aoti_cache_hit", self.cache_hit),
            ("aoti_compile_seconds", round(self.compile_seconds, 3)),
            ("aoti_original_compile_seconds", round(self.original_compile_seconds, 3)),
            ("aoti_outcome", self.outcome),
        ]
        optional = {
            "aoti_max_abs_error": self.max_abs,
            "aoti_max_rel_error": self.max_rel,
            "aoti_engine_seconds": self.engine_seconds,
            "aoti_eager_seconds": self.eager_seconds,
            "aoti_generated_examples": self.shapes_tried or None,
            "aoti_extra_bytes": self.extra_bytes,
        }
        props += [(name, value) for name, value in optional.items() if value is not None]
        if self.probes:
            outcomes = [probe.get("outcome") for probe in self.probes]
            props += [
                ("aoti_probes", len(outcomes)),
                ("aoti_probes_wrong", outcomes.count("wrong")),
                ("aoti_probes_unguarded", outcomes.count("unguarded")),
            ]
        if self.finding is not None:
            figures = self.finding.get("figures") or {}
            props += [
                ("aoti_failure", self.finding["message"]),
                ("aoti_failure_kind", self.finding["kind"]),
                ("aoti_failure_stage", self.finding.get("stage") or "unknown"),
            ]
            for name in ("max_abs", "max_rel", "mismatched", "numel"):
                if name in figures:
                    props.append((f"aoti_failure_{name}", figures[name]))
            if self.finding.get("node"):
                props.append(("aoti_failure_node", self.finding["node"].get("name")))
        return props


@dataclass
class CompileEvent:
    """A compile (or a wait on another process's compile) that this process announced."""

    test: str
    program: str
    device: str
    seconds: float
    worker: str = ""


# --- the JSON report ------------------------------------------------------------------


def write_json_report(
    path: Path,
    records: Sequence[CheckRecord],
    *,
    devices: Sequence[str],
    totals: Mapping[str, Any],
    interrupted: bool = False,
) -> None:
    """Write the report atomically (a reader never sees half a file)."""
    document = {
        "version": REPORT_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "torch": torch_version(),
        "build": torch_build(),
        "devices": list(devices),
        "interrupted": interrupted,
        "totals": dict(totals),
        "checks": [record.to_json() for record in records],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(document, indent=2, default=_json_default) + "\n")
    os.replace(partial, path)


def _json_default(value: Any) -> Any:
    return str(value)


# --- the terminal table ---------------------------------------------------------------


def durations_table(records: Sequence[CheckRecord], limit: int) -> list[str]:
    """The slowest AOTI checks, like ``--durations``: ``limit`` rows, 0 for all."""
    ordered = sorted(records, key=lambda record: record.check_seconds, reverse=True)
    if limit:
        ordered = ordered[:limit]
    rows = [("seconds", "compile", "shapes", "err/tol", "engine/eager", "outcome", "test")]
    for record in ordered:
        compile_text = "cached" if record.cache_hit else f"{record.compile_seconds:.1f}"
        if not record.program:
            compile_text = "-"  # export or compile failed: there is no program
        elif not record.cache_hit and record.compile_seconds == 0:
            compile_text = "shared"
        ratio = record.speed_ratio
        rows.append(
            (
                f"{record.check_seconds:.2f}",
                compile_text,
                str(record.shapes_tried),
                "-" if record.tolerance_used is None else f"{record.tolerance_used:.2g}",
                "-" if ratio is None else f"{ratio:.2f}",
                record.outcome,
                f"{record.test} ({record.device})",
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    return [
        "  ".join(cell.rjust(width) for cell, width in zip(row[:-1], widths)) + "  " + row[-1]
        for row in rows
    ]


# --- header -----------------------------------------------------------------------------


def torch_version() -> str:
    """torch's version, read without importing torch (it takes seconds)."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "not installed"


def torch_build() -> str:
    """``CPU`` or ``CUDA 12.8``: which build of torch is installed, without importing it."""
    spec = util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return "unknown"
    version_file = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        text = version_file.read_text()
    except OSError:
        return "unknown"
    match = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    if match:
        return f"CUDA {match.group(1)}"
    hip = re.search(r"^hip\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    return f"ROCm {hip.group(1)}" if hip else "CPU"


def compiler_version() -> str:
    """The C++ compiler AOTInductor uses on CPU (``CXX`` or ``c++``), first line of its
    ``--version``."""
    name = os.environ.get("CXX") or "c++"
    path = shutil.which(name) or shutil.which("g++")
    if path is None:
        return "none found (AOTInductor on CPU needs one)"
    try:
        output = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return path
    first = output.splitlines()[0] if output else path
    return first


def describe_devices(names: Sequence[str]) -> str:
    """``cpu``, ``cuda:0 (NVIDIA H200, capability 9.0, TF32 matmul off, cuDNN TF32 on)``."""
    import torch

    described = []
    for name in names:
        device = torch.device(name)
        if device.type != "cuda":
            described.append(name)
            continue
        try:
            index = device.index if device.index is not None else torch.cuda.current_device()
            major, minor = torch.cuda.get_device_capability(index)
            gpu = torch.cuda.get_device_name(index)
        except Exception as error:  # the header must never stop a run
            described.append(f"{name} (not described: {type(error).__name__})")
            continue
        described.append(
            f"cuda:{index} ({gpu}, capability {major}.{minor}, "
            f"TF32 matmul {_on(torch.backends.cuda.matmul.allow_tf32)}, "
            f"cuDNN TF32 {_on(torch.backends.cudnn.allow_tf32)})"
        )
    return ", ".join(described)


def _on(flag: bool) -> str:
    return "on" if flag else "off"


# --- progress -----------------------------------------------------------------------------


class CompileProgress:
    """Announces compiles that take a while, without garbling pytest's progress output.

    A timer thread writes "compiling ..." once a compile has lasted
    :data:`PROGRESS_AFTER_SECONDS`; the end line follows when it finishes. ``write`` must
    write a whole line to the terminal (outside output capturing); where there is no
    terminal (an xdist worker), events are only recorded, for the summary.
    """

    def __init__(
        self,
        write: Callable[[str], None] | None,
        *,
        worker: str = "",
        after_seconds: float = PROGRESS_AFTER_SECONDS,
    ) -> None:
        self._write = write
        self._worker = worker
        self._after = after_seconds
        self._lock = threading.Lock()
        self.events: list[CompileEvent] = []

    @contextlib.contextmanager
    def compiling(
        self, test: str, program: str, device: str, verb: str = "compiling"
    ) -> Iterator[None]:
        what = f"{test or 'a program'} (program {program[:12]}, {device})"
        announced = threading.Event()

        def announce() -> None:
            with self._lock:
                announced.set()
                self._emit(f"aoti: {verb} {what} ...")

        timer = threading.Timer(self._after, announce)
        timer.daemon = True
        started = time.perf_counter()
        timer.start()
        failed = True
        try:
            yield
            failed = False
        finally:
            timer.cancel()
            seconds = time.perf_counter() - started
            with self._lock:
                if announced.is_set():
                    done = "compiled" if verb == "compiling" else "waited for"
                    if failed:
                        self._emit(f"aoti: {verb} {what} failed after {seconds:.1f} s")
                    else:
                        self._emit(f"aoti: {done} {what} in {seconds:.1f} s")
            if seconds >= self._after and not failed:
                self.events.append(CompileEvent(test, program, device, seconds, self._worker))

    def _emit(self, line: str) -> None:
        if self._write is not None:
            try:
                self._write(line)
            except Exception:  # a progress line must never fail a compile
                pass


def worker_lines(events: Sequence[CompileEvent]) -> list[str]:
    """What each xdist worker compiled, for the terminal summary."""
    by_worker: dict[str, list[CompileEvent]] = {}
    for event in events:
        by_worker.setdefault(event.worker or "main", []).append(event)
    lines = []
    for worker in sorted(by_worker):
        done = by_worker[worker]
        total = sum(event.seconds for event in done)
        lines.append(f"{worker}: {len(done)} long compile(s) or wait(s), {total:.1f} s")
        lines += [
            f"    {event.seconds:6.1f} s  {event.program[:12]} {event.device}  {event.test}"
            for event in done
        ]
    return lines


@dataclass
class ReportCollector:
    """The records of one session, merged from xdist workers on the controller."""

    records: list[CheckRecord] = field(default_factory=list)
    events: list[CompileEvent] = field(default_factory=list)

    def add_worker_output(self, data: Mapping[str, Any]) -> None:
        self.records += [CheckRecord.from_json(record) for record in data.get("records", [])]
        self.events += [CompileEvent(**event) for event in data.get("events", [])]

    def worker_output(self, events: Sequence[CompileEvent]) -> dict[str, Any]:
        return {
            "records": [record.to_json() for record in self.records],
            "events": [asdict(event) for event in events],
        }
