"""The raw pipeline on the programs ported from PyTorch's AOTInductor tests.

    python benchmarks/raw_upstream.py [NAME ...] [--shard K/N] [--keep DIR]

For each program of ``tests/upstream_programs.py`` (or only those named): export the module
(with its ``dynamic_shapes``), ``run_decompositions()``, ``aoti_compile_and_package`` into a
temporary directory, ``aoti_load_package``, then call the engine and a fresh eager copy of the
module on the example, on each extra size of a dynamic program and on the example once more
(state carried between calls), each on its own copies of the inputs. Tensors are compared with
``torch.testing.assert_close`` (inputs too, after the call: in-place mutation), Python floats
with ``math.isclose(rel_tol=1e-5)``, other leaves and the output structure exactly.

Prints one line per program: name, ``ok``/``wrong``/``error``, the largest absolute error,
the seconds export to load took, and what went wrong; then the total compile seconds. Exits 1
when any program is not ``ok``. No plugin code is used.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch
import torch.utils._pytree as pytree

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import upstream_programs  # noqa: E402

SCALARS_AS_TENSORS: list[str] = []  # where a Python scalar came back as a 0-dim tensor


class Mismatch(AssertionError):
    """An engine result that differs from eager."""


def copied(tree):
    """``tree`` with every tensor copied into new storage of the same strides."""

    def copy(leaf):
        if isinstance(leaf, torch.Tensor):
            out = torch.empty_strided(leaf.size(), leaf.stride(), dtype=leaf.dtype)
            out.copy_(leaf)
            return out
        return leaf

    return pytree.tree_map(copy, tree)


def compare(expected, actual, where: str) -> float:
    """Largest absolute error of ``actual`` against ``expected``; Mismatch when they differ."""
    exp_leaves, exp_spec = pytree.tree_flatten(expected)
    act_leaves, act_spec = pytree.tree_flatten(actual)
    if len(exp_leaves) != len(act_leaves):
        raise Mismatch(f"{where}: {len(act_leaves)} leaves, eager has {len(exp_leaves)}")
    if exp_spec != act_spec:
        # a tuple for a list and the like: the leaves still have to agree one to one
        if [type(x) for x in exp_leaves] != [type(x) for x in act_leaves]:
            raise Mismatch(f"{where}: structure {act_spec} differs from eager's {exp_spec}")
    worst = 0.0
    for i, (exp, act) in enumerate(zip(exp_leaves, act_leaves)):
        if isinstance(exp, torch.Tensor):
            if not isinstance(act, torch.Tensor):
                raise Mismatch(f"{where}[{i}]: {type(act).__name__} for a tensor")
            try:
                torch.testing.assert_close(act, exp, equal_nan=True)
            except AssertionError as error:
                raise Mismatch(f"{where}[{i}]: {str(error).splitlines()[0]}") from None
            if exp.numel():
                diff = act.to(torch.complex128 if exp.is_complex() else torch.float64) - exp.to(
                    torch.complex128 if exp.is_complex() else torch.float64
                )
                worst = max(worst, float(diff.abs().max()))
            continue
        if isinstance(act, torch.Tensor) and act.dim() == 0:
            # a Python scalar output comes back from the engine as a 0-dim tensor
            SCALARS_AS_TENSORS.append(where)
            act = act.item()
        if isinstance(exp, float):
            if not isinstance(act, (float, int)) or not math.isclose(act, exp, rel_tol=1e-5):
                raise Mismatch(f"{where}[{i}]: {act!r} for {exp!r}")
            worst = max(worst, abs(act - exp))
        elif exp != act or type(exp) is not type(act):
            raise Mismatch(f"{where}[{i}]: {act!r} for {exp!r}")
    return worst


def check(program, root: Path) -> tuple[str, float, float, str]:
    """(verdict, max abs error, seconds to an engine, detail) of one program."""
    start = time.perf_counter()
    module, args, kwargs = program.make()
    eager, _, _ = program.make()
    dynamic_shapes = program.dynamic_shapes() if program.dynamic_shapes else None
    try:
        exported = torch.export.export(module, args, kwargs, dynamic_shapes=dynamic_shapes)
        decomposed = exported.run_decompositions()
        path = torch._inductor.aoti_compile_and_package(
            decomposed, package_path=str(root / f"{program.name}.pt2")
        )
        engine = torch._inductor.aoti_load_package(path)
    except Exception as error:  # reported, not raised
        detail = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:300]}"
        return "error", math.nan, time.perf_counter() - start, detail
    seconds = time.perf_counter() - start
    calls = [("example", args)]
    calls += [(f"size {i}", size()) for i, size in enumerate(program.sizes)]
    calls.append(("example again", args))
    worst = 0.0
    scalars_before = len(SCALARS_AS_TENSORS)
    for label, call_args in calls:
        eager_in = copied((call_args, kwargs))
        engine_in = copied((call_args, kwargs))
        try:
            with torch.no_grad():
                expected = eager(*eager_in[0], **eager_in[1])
            got = engine(*engine_in[0], **engine_in[1])
            worst = max(worst, compare(expected, got, f"{label} output"))
            worst = max(worst, compare(eager_in, engine_in, f"{label} inputs after"))
        except Mismatch as error:
            return "wrong", worst, seconds, str(error)
        except Exception as error:  # reported, not raised
            detail = f"{label}: {type(error).__name__}: {str(error).strip()[:300]}"
            return "error", worst, seconds, detail
    note = ""
    if len(SCALARS_AS_TENSORS) > scalars_before:
        note = "(the engine returns its Python scalar outputs as 0-dim tensors)"
    return "ok", worst, seconds, note


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="only these programs")
    parser.add_argument("--shard", default="1/1", help="K/N: every N-th program from the K-th")
    parser.add_argument("--keep", type=Path, help="keep the packages in this directory")
    parser.add_argument("--traceback", action="store_true", help="print errors' tracebacks")
    options = parser.parse_args()
    programs = [upstream_programs.by_name(n) for n in options.names] or list(
        upstream_programs.PROGRAMS
    )
    k, n = (int(part) for part in options.shard.split("/"))
    programs = programs[k - 1 :: n]
    failures = 0
    total = 0.0
    with tempfile.TemporaryDirectory(prefix="raw-upstream-") as scratch:
        root = options.keep or Path(scratch)
        root.mkdir(parents=True, exist_ok=True)
        for program in programs:
            try:
                verdict, worst, seconds, detail = check(program, root)
            except Exception:  # a broken program entry
                verdict, worst, seconds, detail = "error", math.nan, 0.0, "make() failed"
                if options.traceback:
                    traceback.print_exc()
            total += seconds
            failures += verdict != "ok"
            dynamic = "dynamic" if program.dynamic_shapes else "static"
            sizes = f"+{len(program.sizes)}" if program.sizes else ""
            print(
                f"{program.name:34} {verdict:5} max_abs={worst:.3g} {seconds:6.1f}s "
                f"{dynamic}{sizes} {detail}".rstrip(),
                flush=True,
            )
    print(
        f"total: {len(programs)} programs, {failures} not ok, {total:.1f}s to engines", flush=True
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
