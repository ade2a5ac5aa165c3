"""Runs the engine on probe variants in child processes (:mod:`probe_child`).

One child per program runs every variant, first on an engine without input checks, then
on one loaded with ``AOTI_RUNTIME_CHECK_INPUTS=1``. A crash or a hang ends that child only:
the job it died in is recorded as such, and a new child goes on with the rest, until the
time for the program's probes is spent.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_aoti.checks.probe_variants import Variant
    from pytest_aoti.compiling.program import AotiProgram

CHILD_TIMEOUT = 120.0
"""Seconds one child process may run (startup and every job together)."""

_CHILD = Path(__file__).with_name("probe_child.py")


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
            why = _spawn(request_path, outdir, max(1.0, deadline - time.monotonic()))
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


def _spawn(request: Path, outdir: Path, timeout: float) -> str | None:
    """Run the child; None when it exited normally, else why it did not."""
    env = dict(os.environ)
    env.pop("AOTI_RUNTIME_CHECK_INPUTS", None)
    # the child only loads a package built on this machine: skip the ISA probe's compile
    env.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")
    try:
        completed = subprocess.run(
            [sys.executable, str(_CHILD), str(request), str(outdir)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"the engine did not return within {timeout:.0f} s"
    if completed.returncode == 0:
        return None
    if completed.returncode < 0:
        return f"the engine crashed the process (signal {-completed.returncode})"
    tail = completed.stderr.decode(errors="replace").strip().splitlines()
    return f"the probe process failed: {tail[-1] if tail else completed.returncode}"
