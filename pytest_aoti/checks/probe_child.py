"""The child process that calls an AOTInductor engine on deployment-probe inputs.

Run as ``python probe_child.py REQUEST OUTDIR`` by :mod:`pytest_aoti.checks.probes`, never
imported by the plugin: an engine handed an input it was not compiled for may read or
write out of bounds, and on CUDA an illegal access poisons the whole process. Here a
crash costs this process only.

``REQUEST`` is a ``torch.save``'d dict: ``package`` (the ``.pt2`` path), ``device_index``
(None or the CUDA index the engine runs on), ``fresh`` (load an engine per job: the
program mutates registered buffers), ``inputs`` (one ``(args, kwargs)`` per variant) and
``jobs`` (``[variant index, checked]`` pairs, unchecked ones first); each input set is a
flat list of the tensor inputs, in the program's order (the engine drops other leaves). For job ``k`` it
writes ``OUTDIR/started-k`` before the call and ``OUTDIR/job-k.pt`` after it, so the
parent knows which job a crash or a hang happened in.

Checked jobs run on a second engine loaded after ``AOTI_RUNTIME_CHECK_INPUTS=1`` is set:
the generated wrapper reads the variable once, in a function-level ``static`` of the
package's library, on an engine's first call, and each load unpacks its own copy of that
library, so the two engines of this process see different settings. Self-contained: it
imports nothing of pytest-aoti.
"""

from __future__ import annotations

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


def main(request_path: str, outdir: str) -> int:
    os.environ.pop(CHECK_INPUTS, None)  # the unchecked engine must read it unset
    import copy

    import torch
    import torch.utils._pytree as pytree

    request = torch.load(request_path, weights_only=False)
    out = Path(outdir)
    device_index = request.get("device_index")
    engines: dict[bool, Any] = {}

    def engine(checked: bool) -> Any:
        if checked:
            os.environ[CHECK_INPUTS] = "1"
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
            runner = engine(checked)
            with torch.no_grad():
                outputs = runner.boxed_run(list(flat))
            if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
                torch.cuda.synchronize()  # an asynchronous CUDA error belongs to this job
            out_spec = pytree.treespec_loads(runner.get_call_spec()[1])
            result["outputs"] = pytree.tree_unflatten(outputs, out_spec)
            result["inputs"] = flat
        except Exception as error:  # the engine refused the input: that is the answer
            text = str(error).strip()
            lines = [line for line in text.splitlines() if line.strip()]
            useful = [line for line in lines if "unmatched" in line or "Error:" in line]
            result["error"] = (useful or lines or [type(error).__name__])[0].strip()[:300]
        _save(result, out / f"job-{position}.pt")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
