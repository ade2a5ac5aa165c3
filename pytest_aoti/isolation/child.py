"""The child process that calls AOTInductor engines, so an engine crash (or a poisoning CUDA error)
costs this process only. Started as ``python child.py --serve`` by :mod:`.process`; imports nothing
of pytest-aoti. Protocol: one JSON line per program on stdin, ``{"request": REQUEST, "outdir":
OUTDIR}``; one answer line ``{"done": true, "rss": BYTES}`` when its jobs are done; end of input
ends it; prints go to stderr. ``REQUEST`` is a ``torch.save``'d dict: ``package``,
``device_index``, ``fresh`` (an engine per job), ``inputs`` (flat tensor inputs per variant),
``jobs`` (``[variant, checked]``, unchecked first); optionally ``repeat`` (calls per job, default
1), ``discard`` (save no outputs), ``libraries`` and ``imports`` (``[module, file]``) for custom
ops. Job ``k`` writes ``OUTDIR/started-k`` before and ``OUTDIR/job-k.pt`` after its call. Checked
jobs use a second engine first called with ``AOTI_RUNTIME_CHECK_INPUTS=1``: the wrapper reads it
once per loaded library copy, so each engine keeps its first setting."""

from __future__ import annotations

import copy
import importlib.util
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
            # aoti_load_package's runner without torch._inductor's imports (seconds)
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
                # a CUDA error sticks: end here; the parent records a crash, a fresh child goes on
                sys.stderr.write(f"{type(error).__name__}: {str(error).strip()[:300]}\n")
                sys.stderr.flush()
                os._exit(70)
            lines = [line for line in str(error).strip().splitlines() if line.strip()]
            useful = [line for line in lines if "unmatched" in line or "Error:" in line]
            result["error"] = (useful or lines or [type(error).__name__])[0].strip()[:300]
        _save(result, out / f"job-{position}.pt")
    _set_checks(False)
    engines.clear()  # the loaders hold no cycles: no collection (a tenth of a second)


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
