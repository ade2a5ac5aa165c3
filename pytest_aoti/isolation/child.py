"""The child process that calls AOTInductor engines, so an engine crash (or a poisoning CUDA error)
costs this process only. Started as ``python child.py --serve`` by :mod:`.process`; imports nothing
of pytest-aoti. Protocol, through its pipes: per program, one JSON line on stdin,
``{"request_bytes": N, "path": [...]}``, then the N bytes of the ``torch.save``'d ``REQUEST``;
per job as it ends, one line ``{"job": POSITION, "bytes": M}`` on stdout, then the M bytes of its
``torch.save``'d result; after the last job one line ``{"done": true, "rss": BYTES}``. A job
without a whole result is the one the child died in. End of input ends it; prints go to stderr.
``REQUEST`` is a dict: ``package``, ``device_index``, ``fresh`` (an engine per job), ``inputs``
(flat tensor inputs per variant), ``jobs`` (``[variant, checked]``, unchecked first);
optionally ``repeat`` (calls per job, default 1), ``discard`` (save no outputs), ``libraries``
and ``imports`` (``[module, file]``) for custom ops. Checked jobs use a second engine first
called with ``AOTI_RUNTIME_CHECK_INPUTS=1``: the wrapper reads it once per loaded library copy,
so each engine keeps its first setting.

Optionally ``keep_calls`` (save each call's outputs, the inputs after it, which outputs are
inputs, and its seconds: the parent serves the check's calls from them; ``keep_bytes``: the
calls of a request kept in all, the later jobs' beyond it left out) and ``time_calls``
(extra timed calls of job 0's inputs). The child holds one engine at a time: kept from one
request to the next of the same package (one load for a program's screens and probes), freed
(its mapped weights too) before an engine of another package or setting loads, and on
``{"release": true}``. ``{"preload": PACKAGE, "device_index": N}`` loads a package's engine
ahead of its first request (while the parent stores the package). Each of the two is answered
with the ``done`` line alone."""

from __future__ import annotations

import copy
import importlib.util
import io
import json
import os
import sys
from pathlib import Path
from typing import IO, Any

CHECK_INPUTS = "AOTI_RUNTIME_CHECK_INPUTS"


def _answer(answers: IO[bytes], line: dict[str, Any], payload: bytes | memoryview = b"") -> None:
    """Write one answer line and the bytes it announces, then flush: the parent reads each
    job's result as the job ends (and knows a crash's job by what came before)."""
    answers.write(json.dumps(line).encode() + b"\n")
    if payload:
        answers.write(payload)
    answers.flush()


def _send_result(answers: IO[bytes], position: int, result: dict[str, Any]) -> None:
    """Answer job ``position`` with its ``torch.save``'d ``result``."""
    import torch

    saved = io.BytesIO()
    torch.save(result, saved)
    with saved.getbuffer() as payload:  # written from the buffer itself: no copy of it
        _answer(answers, {"job": position, "bytes": payload.nbytes}, payload)


def _read_request(requests: IO[bytes], size: int) -> dict[str, Any] | None:
    """The ``size`` bytes of a request, loaded; None where the input ends first."""
    import torch

    data = requests.read(size)
    if len(data) < size:  # a buffered stream returns less only at its end
        return None
    loaded: dict[str, Any] = torch.load(io.BytesIO(data), weights_only=False)
    return loaded


def _set_checks(checked: bool) -> None:
    # read by an engine's first call: set before every job, the unchecked ones unset
    if checked:
        os.environ[CHECK_INPUTS] = "1"
    else:
        os.environ.pop(CHECK_INPUTS, None)


_HELD: dict[str, Any] = {}
"""The engine this child holds: ``slot`` (package, device, checked) and ``runner``."""


def release(*, exiting: bool = False) -> None:
    """Free the held engine and the weights its library mapped (they stay mapped otherwise:
    torch never unloads an engine's library); ``exiting``: only the engine, whose
    extraction folder goes with it (the process's end gives its memory back)."""
    import gc

    if _HELD.pop("runner", None) is None:
        return
    _HELD.clear()
    gc.collect()  # the runner's extraction folder goes with it
    if not exiting:
        _drop_unloaded_libraries()


def _drop_unloaded_libraries() -> None:
    """Give back the clean pages of the deleted engine libraries still mapped: their weights."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        mappings = _clean_deleted_mappings(Path("/proc/self/smaps").read_text())
    except (OSError, AttributeError):  # not Linux: the pages stay
        return
    for start, end in mappings:
        libc.madvise(start, end - start, 4)  # MADV_DONTNEED: re-read from the file if touched


def _clean_deleted_mappings(smaps: str) -> list[tuple[int, int]]:
    """Read-only mappings of deleted engine libraries (``aotinductor`` folders) without a
    page of their own: dropping them loses nothing (a relocated page is an anonymous copy)."""
    found: list[tuple[int, int]] = []
    current: tuple[int, int] | None = None
    for line in smaps.splitlines():
        parts = line.split(maxsplit=5)
        if parts and "-" in parts[0] and len(parts) >= 5 and ":" not in parts[0]:
            current = None
            path = parts[5] if len(parts) == 6 else ""
            if "w" not in parts[1] and "x" not in parts[1] and "aotinductor" in path:
                if path.endswith("(deleted)"):
                    low, high = (int(value, 16) for value in parts[0].split("-"))
                    current = (low, high)
        elif current is not None and parts[:1] == ["Anonymous:"]:
            if parts[1] == "0":
                found.append(current)
            current = None
    return found


def _load(package: str, device_index: int | None, checked: bool) -> Any:
    """The engine of ``package`` (with input checks: ``checked``), loaded unless held."""
    import torch

    slot = [_identity(package), device_index, checked]
    if _HELD.get("slot") != slot:
        release()  # one engine at a time: the last one's weights go first
        # aoti_load_package's runner without torch._inductor's imports (seconds)
        _HELD["runner"] = torch._C._aoti.AOTIModelPackageLoader(
            package, "model", False, 1, -1 if device_index is None else device_index
        )
        _HELD["slot"] = slot
    return _HELD["runner"]


def _identity(package: str) -> list[int] | str:
    """The package file itself (a hard link of it is the same file); its path where it
    cannot be read."""
    try:
        found = os.stat(package)
    except OSError:
        return package
    return [found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns]


def probe(request: dict[str, Any], answers: IO[bytes]) -> None:
    """Run one program's jobs, each answered on ``answers`` as it ends (see the module's
    docstring)."""
    import time

    import torch
    import torch.utils._pytree as pytree

    try:
        _prepare(request)
    except Exception as error:  # not the engine's doing: every job says why it did not run
        why = f"{type(error).__name__}: {str(error).strip()[:300]}"
        for position, (index, checked) in enumerate(request["jobs"]):
            _send_result(answers, position, {"index": index, "checked": checked, "unprepared": why})
        return
    device_index = request.get("device_index")
    fresh = bool(request.get("fresh"))

    def engine(checked: bool) -> Any:
        if fresh:
            release()
        return _load(request["package"], device_index, checked)

    def sync() -> None:
        if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            torch.cuda.synchronize()  # an asynchronous CUDA error belongs to this job

    runner: Any = None
    kept = 0  # bytes of the calls kept so far, ``keep_bytes`` at most
    for position, (index, checked) in enumerate(request["jobs"]):
        runner = None  # the engine a job is done with must be free to go before the next loads
        flat = copy.deepcopy(request["inputs"][index])  # keeps aliasing within the set
        result: dict[str, Any] = {"index": index, "checked": checked}
        try:
            _set_checks(checked)
            runner = engine(checked)
            calls = []
            for _ in range(int(request.get("repeat") or 1)):
                before = time.perf_counter()
                with torch.no_grad():
                    outputs = runner.boxed_run(list(flat))
                sync()
                seconds = time.perf_counter() - before
                if request.get("keep_calls"):
                    calls.append(_kept_call(runner, outputs, flat, seconds))
            size = _tensor_bytes(calls)
            if calls and kept + size <= (request.get("keep_bytes") or float("inf")):
                result["calls"], kept = calls, kept + size  # beyond: the parent calls it
            if request.get("time_calls") and position == 0:
                result["seconds"] = _timed(runner, request["inputs"][index], request, sync)
            if not request.get("discard"):
                out_spec = _out_spec(runner)
                result["outputs"] = pytree.tree_unflatten(outputs, out_spec)
                result["inputs"] = flat
        except Exception as error:  # the engine refused the input: that is the answer
            if _poisons_process(error):
                # a CUDA error sticks: end here; the parent records a crash, a fresh child goes on
                sys.stderr.write(f"{type(error).__name__}: {str(error).strip()[:300]}\n")
                sys.stderr.flush()
                os._exit(70)
            lines = [line for line in str(error).strip().splitlines() if line.strip()]
            useful = [line for line in lines if "unmatched" in line or "Error:" in line]
            result["error"] = (useful or lines or [type(error).__name__])[0].strip()[:300]
        _send_result(answers, position, result)
    _set_checks(False)
    if fresh:
        release()


def _kept_call(runner: Any, outputs: list[Any], flat: list[Any], seconds: float) -> dict[str, Any]:
    """One call as the parent serves it again: outputs (as the engine's tree), the inputs
    after it, which outputs share an input's storage (its index, else -1), its seconds."""
    import torch.utils._pytree as pytree

    def storage(leaf: Any) -> int:
        return leaf.untyped_storage().data_ptr() if hasattr(leaf, "untyped_storage") else 0

    storages = [storage(leaf) for leaf in flat]
    aliases = [
        storages.index(storage(leaf)) if storage(leaf) and storage(leaf) in storages else -1
        for leaf in outputs
    ]
    out_spec = _out_spec(runner)
    copies = [leaf.clone() if hasattr(leaf, "clone") else leaf for leaf in outputs]
    return {
        "outputs": pytree.tree_unflatten(copies, out_spec),
        "aliases": aliases,
        "inputs": copy.deepcopy(flat),  # as laid out (and shared) as the call left them
        "seconds": seconds,
    }


def _tensor_bytes(tree: Any) -> int:
    import torch
    import torch.utils._pytree as pytree

    return sum(
        leaf.numel() * leaf.element_size()
        for leaf in pytree.tree_leaves(tree)
        if isinstance(leaf, torch.Tensor)
    )


def _out_spec(runner: Any) -> Any:
    """The held engine's output tree spec, read once per held engine (a JSON parse each call):
    every job calls the engine it holds."""
    import torch.utils._pytree as pytree

    if "out_spec" not in _HELD:
        _HELD["out_spec"] = pytree.treespec_loads(runner.get_call_spec()[1])
    return _HELD["out_spec"]


def _timed(runner: Any, inputs: list[Any], request: dict[str, Any], sync: Any) -> list[float]:
    """Seconds of up to ``time_calls`` calls on copies of ``inputs`` (at most
    ``time_budget`` seconds in all)."""
    import time

    import torch

    flat = copy.deepcopy(inputs)
    samples: list[float] = []
    while len(samples) < int(request["time_calls"]) and sum(samples) < float(
        request.get("time_budget") or 1.0
    ):
        sync()
        before = time.perf_counter()
        with torch.no_grad():
            runner.boxed_run(list(flat))
        sync()
        samples.append(time.perf_counter() - before)
    return samples


_PREPARED: set[str] = set()


def _prepare(request: dict[str, Any]) -> None:
    """Load the program's custom op libraries and modules, once per process."""
    import torch

    for library in request.get("libraries") or ():
        if library not in _PREPARED:
            torch.ops.load_library(library)  # type: ignore[no-untyped-call]
            _PREPARED.add(library)
    for name, file in request.get("imports") or ():
        if name in _PREPARED or name in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(name, file)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {name} from {file}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        _PREPARED.add(name)


def _poisons_process(error: BaseException) -> bool:
    """Whether ``error`` (a CUDA error, sticky to the context) leaves the process unusable."""
    return type(error).__name__ == "AcceleratorError" or "CUDA error" in str(error)


def _resident_bytes() -> int:
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def serve() -> int:
    """Answer requests from stdin until it ends."""
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what torch or an engine prints must not garble an answer
    _set_checks(False)
    import torch  # noqa: F401  # imported while the parent still compiles

    requests = sys.stdin.buffer
    while line := requests.readline():
        if not line.strip():
            continue
        asked = json.loads(line)
        if asked.get("release"):
            release()
        elif asked.get("preload"):
            try:
                _load(asked["preload"], asked.get("device_index"), checked=False)
            except Exception:  # the request that needs the engine says what is wrong
                release()
        else:
            if asked.get("path"):  # where the parent imports the user's modules from
                sys.path[:0] = [entry for entry in asked["path"] if entry not in sys.path]
            # the whole request is read before anything is written: the parent writes it at once
            request = _read_request(requests, int(asked["request_bytes"]))
            if request is None:  # the parent is gone
                break
            probe(request, answers)
            del request
        _answer(answers, {"done": True, "rss": _resident_bytes()})
    # the end of input: free the engine (its unpacked folder goes with it), then exit without
    # tearing torch down, which takes longer than the parent waits
    release(exiting=True)
    answers.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(serve())
