"""The child process that calls AOTInductor engines before (or instead of) the test process.

Started once per test process (per xdist worker) as ``python child.py --serve`` by
:mod:`pytest_aoti.isolation.process`, never imported by the plugin: an engine may abort,
read or write out of bounds (a deployment probe's input it was not compiled for, a kernel
that overruns its buffer), and on CUDA an illegal access poisons the whole process. Here a
crash costs this process only, and torch's import is paid once for every program the
process runs.

It reads one JSON line per program on stdin, ``{"request": REQUEST, "outdir": OUTDIR}``, and
answers one JSON line on its own stdout once that program's jobs are done:
``{"done": true, "rss": BYTES}``; end of input ends it. Anything torch or an engine prints
goes to stderr, so it never garbles an answer.

``REQUEST`` is a ``torch.save``'d dict: ``package`` (the ``.pt2`` path), ``device_index``
(None or the CUDA index the engine runs on), ``fresh`` (load an engine per job: the
program mutates registered buffers), ``inputs`` (one flat list of the tensor inputs per
variant, in the program's order: the engine drops other leaves) and ``jobs``
(``[variant index, checked]`` pairs, unchecked ones first); optionally ``repeat`` (calls
per job on the same inputs, which carry what a call wrote in place to the next: default
1), ``discard`` (save no outputs: only whether the calls returned), ``libraries`` (custom
op libraries to load, ``torch.ops.load_library``) and ``imports`` (``[module name, file]``
of the Python modules that registered the program's custom ops, imported once per
process). For job ``k`` it writes
``OUTDIR/started-k`` before the call and ``OUTDIR/job-k.pt`` after it, so the parent knows
which job a crash or a hang happened in.

Checked jobs run on a second engine of the same package, called first with
``AOTI_RUNTIME_CHECK_INPUTS=1`` set: the generated wrapper reads the variable once, in a
function-level ``static`` of the package's library, on an engine's first call, and each
load unpacks its own copy of that library, so every engine of this process keeps the
setting it was first called with. Self-contained: it imports nothing of pytest-aoti.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

CHECK_INPUTS = "AOTI_RUNTIME_CHECK_INPUTS"


def _save(value: Any, path: Path) -> None:
    import torch

    partial = path.with_name(path.name + ".tmp")
    torch.save(value, partial)
    os.replace(partial, path)


def _set_checks(checked: bool) -> None:
    # read by an engine's first call: set before every job, the unchecked ones unset
    if checked:
        os.environ[CHECK_INPUTS] = "1"
    else:
        os.environ.pop(CHECK_INPUTS, None)


def probe(request_path: str, outdir: str) -> None:
    """Run one program's jobs (see the module's docstring)."""
    import copy

    import torch
    import torch.utils._pytree as pytree

    request = torch.load(request_path, weights_only=False)
    out = Path(outdir)
    try:
        _prepare(request)
    except Exception as error:  # not the engine's doing: every job says why it did not run
        why = f"{type(error).__name__}: {str(error).strip()[:300]}"
        for position, (index, checked) in enumerate(request["jobs"]):
            _save(
                {"index": index, "checked": checked, "unprepared": why}, out / f"job-{position}.pt"
            )
        return
    device_index = request.get("device_index")
    engines: dict[bool, Any] = {}

    def engine(checked: bool) -> Any:
        if request.get("fresh") or checked not in engines:
            # the loader itself, without torch._inductor's imports (seconds): the same
            # runner aoti_load_package returns, called with the flat tensor inputs
            engines[checked] = torch._C._aoti.AOTIModelPackageLoader(
                request["package"], "model", False, 1, -1 if device_index is None else device_index
            )
        return engines[checked]

    for position, (index, checked) in enumerate(request["jobs"]):
        (out / f"started-{position}").write_text("")
        flat = copy.deepcopy(request["inputs"][index])  # keeps aliasing within the set
        result: dict[str, Any] = {"index": index, "checked": checked}
        try:
            _set_checks(checked)
            runner = engine(checked)
            for _ in range(int(request.get("repeat") or 1)):
                with torch.no_grad():
                    outputs = runner.boxed_run(list(flat))
                if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
                    torch.cuda.synchronize()  # an asynchronous CUDA error belongs to this job
            if not request.get("discard"):
                out_spec = pytree.treespec_loads(runner.get_call_spec()[1])
                result["outputs"] = pytree.tree_unflatten(outputs, out_spec)
                result["inputs"] = flat
        except Exception as error:  # the engine refused the input: that is the answer
            if _poisons_process(error):
                # a CUDA error sticks to the process: every later job would fail the same
                # way and read as refused. End here; the parent records a crash and starts
                # a fresh child for the jobs left.
                sys.stderr.write(f"{type(error).__name__}: {str(error).strip()[:300]}\n")
                sys.stderr.flush()
                os._exit(70)
            text = str(error).strip()
            lines = [line for line in text.splitlines() if line.strip()]
            useful = [line for line in lines if "unmatched" in line or "Error:" in line]
            result["error"] = (useful or lines or [type(error).__name__])[0].strip()[:300]
        _save(result, out / f"job-{position}.pt")
    _set_checks(False)
    engines.clear()  # the loaders hold no cycles: no collection (a tenth of a second)


_PREPARED: set[str] = set()


def _prepare(request: dict[str, Any]) -> None:
    """Load the custom op libraries and import the modules that register the program's
    custom ops, once per process: the engine calls them through torch's dispatcher."""
    import importlib.util

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
    """Whether ``error`` leaves the process unusable for later engine calls (a CUDA error:
    an illegal access or a device-side assert sticks to the CUDA context)."""
    text = str(error)
    return type(error).__name__ == "AcceleratorError" or "CUDA error" in text


def _resident_bytes() -> int:
    """This process's resident memory (0 where it cannot be read)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def serve() -> int:
    """Answer requests from stdin until it ends."""
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # what torch or an engine prints must not garble an answer
    _set_checks(False)
    for line in sys.stdin:
        if not line.strip():
            continue
        asked = json.loads(line)
        if asked.get("path"):  # where the parent imports the user's modules from
            sys.path[:0] = [entry for entry in asked["path"] if entry not in sys.path]
        probe(asked["request"], asked["outdir"])
        answers.write(json.dumps({"done": True, "rss": _resident_bytes()}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(serve())
