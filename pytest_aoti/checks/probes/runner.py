"""Runs the engine on probe variants in a long-lived child process (:mod:`.child`).

One child per test process (per xdist worker) probes every program in turn: each
variant first on an engine without input checks, then on one called with
``AOTI_RUNTIME_CHECK_INPUTS=1``. So torch's import is paid once per session, not per
program. A crash or a hang ends that child only: the job it died in is recorded as such,
and a new child goes on with the rest, until the time for the program's probes is spent.
The child is also replaced after :data:`PACKAGES_PER_CHILD` programs or above
:data:`MEMORY_CAP` (each load leaves about its package's size resident), and shut down
with the session (:func:`shutdown`).
"""

from __future__ import annotations

import atexit
import copy
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_aoti.checks.probes.variants import Variant
    from pytest_aoti.compiling.program import AotiProgram

CHILD_TIMEOUT = 120.0
"""Seconds one child process may run (startup and every job together)."""

PACKAGES_PER_CHILD = 32
"""Programs one child probes before a fresh one takes over."""

MEMORY_CAP = 2 * 2**30
"""Resident bytes above which the child is replaced after its current program."""

_CHILD = Path(__file__).with_name("child.py")


def run_child(
    program: AotiProgram, variants: list[Variant], timeout: float
) -> dict[tuple[int, bool], dict[str, Any]]:
    """Run every variant unchecked, then with the engine's input checks, in child
    processes; a crash or a hang ends a child, and the next one goes on after the job it
    died in. Returns the result per ``(variant index, checked)``; a job that crashed or
    hung has ``{"crashed": why}``."""
    import torch

    jobs = [(index, False) for index in range(len(variants))]
    jobs += [(index, True) for index in range(len(variants))]
    results: dict[tuple[int, bool], dict[str, Any]] = {}
    device = program.device
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryDirectory(prefix="pytest-aoti-probes-") as root:
        request_path = Path(root) / "request.pt"
        torch.save(
            {
                "package": str(program.package_path),
                "device_index": device.index if device.type == "cuda" else None,
                "fresh": bool(program.mutated_buffers),
                "inputs": [copy.deepcopy(_flat_tensors(program, v)) for v in variants],
                "jobs": [],
            },
            request_path,
        )
        remaining = jobs
        attempt = 0
        while remaining:
            attempt += 1
            outdir = Path(root) / f"run-{attempt}"
            outdir.mkdir()
            request = torch.load(request_path, weights_only=False)
            request["jobs"] = remaining
            torch.save(request, request_path)
            why = _child().run(request_path, outdir, max(1.0, deadline - time.monotonic()))
            done = 0
            for position, job in enumerate(remaining):
                path = outdir / f"job-{position}.pt"
                if not path.exists():
                    break
                results[job] = torch.load(path, weights_only=False, map_location="cpu")
                done += 1
            if done == len(remaining):
                break
            if why is None:
                why = "the child process stopped without a result"
            crashed = remaining[done]
            results[crashed] = {"crashed": why}
            remaining = remaining[done + 1 :]
            if time.monotonic() >= deadline:
                for job in remaining:
                    results[job] = {"crashed": "not run: the probes ran out of time"}
                break
    return results


def _flat_tensors(program: AotiProgram, variant: Variant) -> list[Any]:
    """The tensor leaves of a variant in the program's input order: what the engine takes."""
    import torch

    return [leaf for leaf in _ordered_leaves(program, variant)[0] if isinstance(leaf, torch.Tensor)]


def _ordered_leaves(program: AotiProgram, variant: Variant) -> tuple[list[Any], Any]:
    import torch.utils._pytree as pytree

    from pytest_aoti.checks.aliasing import _ordered_kwargs

    ordered = _ordered_kwargs(program.exported, variant.kwargs)
    return pytree.tree_flatten((tuple(variant.args), ordered))


def with_tensors(
    program: AotiProgram, variant: Variant, tensors: list[Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The variant's ``(args, kwargs)`` with its tensors replaced by ``tensors``."""
    import torch
    import torch.utils._pytree as pytree

    leaves, spec = _ordered_leaves(program, variant)
    given = iter(tensors)
    replaced = [next(given) if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
    args, kwargs = pytree.tree_unflatten(replaced, spec)
    return tuple(args), dict(kwargs)


class ProbeProcess:
    """The long-lived child: started on first use, replaced after a crash, a hang,
    :data:`PACKAGES_PER_CHILD` programs or above :data:`MEMORY_CAP`."""

    def __init__(self, script: Path) -> None:
        self.script = script
        self.starts = 0
        """Children started so far (one unless one crashed, hung or was replaced)."""
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._stderr_start = 0
        """Where the running program's part of the child's stderr begins."""
        self._packages = 0

    def run(self, request: Path, outdir: Path, timeout: float) -> str | None:
        """Have the child run ``request``'s jobs; None when it answered, else why not
        (the child is then gone, and the next call starts another)."""
        process = self._process
        if process is None or process.poll() is not None:
            process = self._start()
        assert process.stdin is not None and process.stdout is not None
        if self._stderr is not None:
            # the child's stderr holds every earlier program's lines: a failure quotes
            # only what this program wrote
            self._stderr_start = os.fstat(self._stderr.fileno()).st_size
        try:
            asked = {"request": str(request), "outdir": str(outdir)}
            process.stdin.write((json.dumps(asked) + "\n").encode())
            process.stdin.flush()
        except OSError:
            return self._failed()
        line = _read_line(process.stdout, timeout)
        if line is None:
            self.close()
            return f"the engine did not return within {timeout:.0f} s"
        try:
            answer = json.loads(line)
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or not answer.get("done"):
            return self._failed()
        self._packages += 1
        if self._packages >= PACKAGES_PER_CHILD or int(answer.get("rss") or 0) > MEMORY_CAP:
            self.close()
        return None

    def _start(self) -> subprocess.Popen[bytes]:
        self.close()
        env = dict(os.environ)
        env.pop("AOTI_RUNTIME_CHECK_INPUTS", None)
        # the child only loads packages built on this machine: skip the ISA probe's compile
        env.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")
        self._stderr = tempfile.TemporaryFile(prefix="pytest-aoti-probes-")
        self._process = subprocess.Popen(
            [sys.executable, str(self.script), "--serve"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        self._packages = 0
        self.starts += 1
        return self._process

    def _failed(self) -> str:
        """Why the child stopped without an answer; the child is gone after it."""
        process = self._process
        assert process is not None
        try:
            code = process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        tail = ""
        if self._stderr is not None:
            self._stderr.seek(self._stderr_start)
            lines = self._stderr.read().decode(errors="replace").strip().splitlines()
            tail = lines[-1] if lines else ""
        self.close()
        if code is not None and code < 0:
            return f"the engine crashed the process (signal {-code})"
        return f"the probe process failed: {tail or code}"

    def close(self) -> None:
        """End the child: end of input first, then a kill if it does not exit."""
        process, self._process = self._process, None
        if process is not None:
            if process.stdin is not None:
                try:
                    process.stdin.close()
                except OSError:
                    pass
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


def _read_line(stream: IO[bytes], timeout: float) -> bytes | None:
    """One line from ``stream`` within ``timeout`` seconds; None on a timeout; what was read
    (possibly empty) when the stream ends."""
    deadline = time.monotonic() + timeout
    fd = stream.fileno()
    data = b""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while not data.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
    return data


_PROCESS: ProbeProcess | None = None


def _child() -> ProbeProcess:
    """This process's probe child (see :class:`ProbeProcess`)."""
    global _PROCESS
    if _PROCESS is None or _PROCESS.script != _CHILD:
        if _PROCESS is not None:
            _PROCESS.close()
        _PROCESS = ProbeProcess(_CHILD)
        atexit.register(_PROCESS.close)
    return _PROCESS


def shutdown() -> None:
    """End this process's probe child, if there is one (at the end of the session)."""
    global _PROCESS
    if _PROCESS is not None:
        _PROCESS.close()
        _PROCESS = None
