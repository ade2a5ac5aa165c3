"""A self-contained repro bundle for a failed ``aoti.check``, runnable with plain torch.

``--aoti-keep-failed=DIR`` writes one folder per failing check with :func:`write_bundle`:
the exported program, the compiled package, the failing inputs, what eager PyTorch
produced, and ``repro.py``, which replays the engine (and the exported and decomposed
programs) against eager's saved results without pytest or pytest-aoti. It is meant for
whoever fixes the compiler, on a machine that has only torch.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_aoti.compiling.pipeline import quiet_torch_deprecations
from pytest_aoti.trees import clone_tree

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram

MAX_NAME_LENGTH = 150
"""Longest folder name :func:`bundle_dir_name` returns, hash suffix included."""

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]", re.ASCII)


def bundle_dir_name(nodeid: str) -> str:
    """A filesystem-safe folder name for a pytest node id.

    ``tests/test_m.py::test_x[cpu]`` becomes ``tests_test_m.py__test_x-cpu-``. Characters
    other than letters, digits, ``.``, ``_`` and ``-`` are replaced; where that replacement
    is lossy (spaces, quotes, non-ASCII parameter ids) or the name exceeds
    :data:`MAX_NAME_LENGTH`, a hash of the whole id is appended so that distinct ids keep
    distinct folders.
    """
    readable = nodeid.replace("::", "__").replace("/", "_").replace("\\", "_")
    readable = readable.replace("[", "-").replace("]", "-")
    safe = _UNSAFE.sub("_", readable)
    lossy = safe != readable
    if not safe or safe.startswith("."):
        # "", "." and ".." are not folders of their own; a leading dot would hide the folder
        safe = "_" + safe
        lossy = True
    if not lossy and len(safe) <= MAX_NAME_LENGTH:
        return safe
    suffix = "-" + hashlib.sha256(nodeid.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return safe[: MAX_NAME_LENGTH - len(suffix)] + suffix


def write_bundle(
    directory: Path,
    *,
    exported: ExportedProgram,
    package_path: Path,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    calls: int,
    eager_results: Sequence[Any],
    rtol: float | None,
    atol: float | None,
    finding_text: str,
    finding_json: Mapping[str, Any],
    device: torch.device | str | None = None,
) -> Path:
    """Write a repro bundle for one failed check into ``directory``; return its ``repro.py``.

    ``directory`` is created (its parent must exist); an existing one is emptied first.
    ``exported`` is the program ``torch.export.export`` returned, before decomposition;
    ``args`` / ``kwargs`` the inputs as the check gave them to the engine before its first
    call; ``eager_results`` one ``(outputs, {input name: tensor after the call})`` pytree
    per call, for every tensor user input. ``rtol`` / ``atol`` of ``None`` mean
    ``torch.testing.assert_close``'s defaults for the dtype. ``device`` is the device the
    package was compiled for; by default that of the first input tensor (else of the
    program's state, else CPU).

    The folder holds ``exported.pt2``, ``package.pt2``, ``inputs.pt``, ``eager.pt``,
    ``finding.txt``, ``finding.json``, ``check.json`` and ``repro.py``.
    """
    import torch

    if calls < 1 or len(eager_results) != calls:
        raise ValueError(f"{calls} calls need {calls} eager results, got {len(eager_results)}")
    if directory.is_symlink() or directory.is_file():
        directory.unlink()
    elif directory.exists():
        shutil.rmtree(directory)
    directory.mkdir()

    # clones: a view of a large tensor would otherwise save the whole storage, and the
    # check ran on clones too, so no input aliases another
    inputs = clone_tree({"args": tuple(args), "kwargs": dict(kwargs)})
    where = torch.device(device) if device is not None else _device_of(exported, inputs)
    (directory / "finding.txt").write_text(finding_text.rstrip("\n") + "\n", encoding="utf-8")
    _write_json(directory / "finding.json", finding_json)
    _write_json(
        directory / "check.json",
        {
            "calls": calls,
            "rtol": rtol,
            "atol": atol,
            "device": str(where),
            "torch": torch.__version__,
        },
    )
    torch.save(inputs, directory / "inputs.pt")
    torch.save(clone_tree(list(eager_results)), directory / "eager.pt")
    shutil.copyfile(package_path, directory / "package.pt2")
    with quiet_torch_deprecations():
        torch.export.save(exported, directory / "exported.pt2")
    script = directory / "repro.py"
    script.write_text(REPRO_SCRIPT, encoding="utf-8")
    return script


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    # default=str: a finding may carry a dtype or a device; the file is for reading
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")


def _device_of(exported: ExportedProgram, inputs: Any) -> torch.device:
    import torch
    import torch.utils._pytree as pytree

    state = [*exported.state_dict.values(), *exported.constants.values()]
    for leaf in [*pytree.tree_leaves(inputs), *state]:
        if isinstance(leaf, torch.Tensor):
            return leaf.device
    return torch.device("cpu")


# The script is plain text rather than a module of this package: it must run where only
# torch is installed, and a compiler engineer reads it before anything else.
REPRO_SCRIPT = r'''"""Reproduce an AOTInductor engine that differs from eager PyTorch, found by pytest-aoti.

Run it with plain torch, from any directory:

    python repro.py

It reads the files beside it:

    exported.pt2   the program torch.export.export returned (before run_decompositions)
    package.pt2    the AOTInductor package compiled from it (aoti_compile_and_package)
    inputs.pt      the failing inputs: {"args": (...), "kwargs": {...}}
    eager.pt       what eager PyTorch (the original module) produced, one entry per call:
                   (outputs, {input name: that input tensor after the call})
    check.json     calls, rtol and atol (null: torch.testing.assert_close's defaults for the
                   dtype), the device and the torch version that wrote the bundle
    finding.txt    the failure as pytest-aoti reported it (finding.json: the same as data)

It runs the engine `calls` times on its own copy of the inputs: inputs the program mutates
are written in place and the same copy is used again by the next call, as in the check.
After each call it compares the outputs and every tensor input with eager's, using
torch.testing.assert_close, and prints each leaf that differs. It then does the same with
the exported program (exported.module(), no compile) and the decomposed one
(run_decompositions().module()), which tells where the difference comes from: export,
decomposition, or the AOTInductor compile itself.

Exit status: 1 if the engine's mismatch with eager reproduces, 0 if it does not, 2 if this
machine lacks the device the package was compiled for.
"""

import json
import sys
import traceback
import warnings
from pathlib import Path

import torch
import torch._inductor
import torch.utils._pytree as pytree
from torch.export.graph_signature import InputKind

HERE = Path(__file__).resolve().parent

# torch's notices about its own internals (run_decompositions copies deprecated tree specs)
warnings.filterwarnings("ignore", category=FutureWarning, module="copyreg")

# torch.testing.assert_close's default (rtol, atol) per dtype; other dtypes compare exactly
DEFAULT_TOLERANCES = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex32: (1e-3, 1e-5),
    torch.complex64: (1.3e-6, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}


def main():
    check = json.loads((HERE / "check.json").read_text())
    calls, rtol, atol = check["calls"], check["rtol"], check["atol"]
    device = torch.device(check["device"])
    if not device_available(device):
        print(
            f"The package was compiled for {device}, which this machine does not have: "
            f"run this bundle where torch.{device.type}.is_available().",
            file=sys.stderr,
        )
        return 2
    finding = (HERE / "finding.txt").read_text().splitlines()
    print(f"pytest-aoti reported: {finding[0] if finding else '(finding.txt is empty)'}")
    print(f"torch {torch.__version__}, device {device}; bundle written by torch {check['torch']}")
    print(f"{plural(calls, 'call', 'calls')}; {describe_tolerance(rtol, atol)}")

    exported = load_exported()
    load_options = {}
    if device.type == "cuda" and device.index is not None:
        load_options["device_index"] = device.index
    engine = torch._inductor.aoti_load_package(str(HERE / "package.pt2"), **load_options)
    # these files were written by pytest-aoti next to a compiled shared library, which runs
    # native code anyway: trust the bundle as a whole, or do not run it
    inputs = torch.load(HERE / "inputs.pt", map_location=device, weights_only=False)
    eager = torch.load(HERE / "eager.pt", map_location=device, weights_only=False)

    def replay(title, label, program):
        print(f"\n{title} vs eager:")
        mismatches = run_and_compare(
            label, program, exported, inputs["args"], inputs["kwargs"], eager, rtol, atol
        )
        for mismatch in mismatches:
            print("  " + mismatch.replace("\n", "\n    "))
        if mismatches:
            print(f"  {plural(len(mismatches), 'mismatch', 'mismatches')}")
        else:
            print("  matches on every call")
        return bool(mismatches)

    # each program is loaded afresh: running one mutates the buffers it shares with the file's
    # program object, and every replay must start from the exported state, as eager did
    engine_differs = replay("AOTI engine", "engine", engine)
    exported_module = load_exported().module()
    export_differs = replay("exported program (exported.module())", "exported", exported_module)
    try:
        decomposed = load_exported().run_decompositions().module()
    except Exception as error:
        print(f"\nrun_decompositions() failed: {type(error).__name__}: {error}")
        decompose_differs = None
    else:
        title = "decomposed program (run_decompositions().module())"
        decompose_differs = replay(title, "decomposed", decomposed)

    print()
    if not engine_differs:
        print("NOT REPRODUCED: the AOTI engine matches eager on every call.")
        if export_differs:
            print("(The exported program differs from eager, though.)")
        return 0
    print("REPRODUCED: the AOTI engine differs from eager.")
    if export_differs:
        print(
            "The exported program differs from eager too: the difference is already in what "
            "torch.export traced (an export bug, or code the model runs only while exporting), "
            "before any decomposition or compile."
        )
    elif decompose_differs:
        print(
            "The exported program matches eager but the decomposed one does not: "
            "run_decompositions() introduced the difference."
        )
    elif decompose_differs is None:
        print("The exported program matches eager: decomposition or the AOTI compile broke it.")
    else:
        print(
            "The exported and the decomposed programs match eager: the AOTI compile "
            "(or the engine's runtime) introduced the difference."
        )
    return 1


def load_exported():
    return torch.export.load(HERE / "exported.pt2")


def run_and_compare(label, program, exported, args, kwargs, eager, rtol, atol):
    """Call `program` len(eager) times on one copy of the inputs; return the mismatches.

    After each call its outputs, and each tensor input as the call left it, are compared
    with eager's; `label` names the program's values in the figures.
    """
    args, kwargs = clone((args, kwargs))
    inputs = named_user_inputs(exported, args, kwargs)
    mismatches = []
    for call, (eager_outputs, eager_inputs) in enumerate(eager, start=1):
        where = f"call {call} of {len(eager)}"
        try:
            with torch.no_grad():
                outputs = program(*args, **kwargs)
        except Exception:
            mismatches.append(f"{where}: raised\n{traceback.format_exc().rstrip()}")
            break
        expected, expected_spec = pytree.tree_flatten_with_path(eager_outputs)
        actual, actual_spec = pytree.tree_flatten_with_path(outputs)
        if expected_spec != actual_spec:
            mismatches.append(
                f"output structure, {where}: eager {expected_spec}, {label} {actual_spec}"
            )
        else:
            for (path, want), (_, got) in zip(expected, actual):
                location = f"output{pytree.keystr(path)}, {where}"
                mismatches += compare(location, label, want, got, rtol, atol)
        for name, want in eager_inputs.items():
            location = f"input {name!r}, {where}"
            mismatches += compare(location, label, want, inputs[name], rtol, atol)
    return mismatches


def compare(location, label, expected, actual, rtol, atol):
    """[] if `actual` passes assert_close against eager's `expected`, else [the figures]."""
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        if isinstance(actual, torch.Tensor) and actual.dim() == 0:
            actual = actual.item()  # an engine returns a Python number output as a 0-dim tensor
    if not isinstance(expected, (torch.Tensor, int, float, complex)):
        same = expected == actual
        return [] if same else [f"{location}: eager {expected!r}, {label} {actual!r}"]
    rtol, atol = tolerance(expected, rtol, atol)
    try:
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError as error:
        return [f"{location}: {figures(label, expected, actual, rtol, atol, error)}"]
    return []


def figures(label, expected, actual, rtol, atol, error):
    """How far `actual` is from `expected`: count beyond tolerance, max abs and rel error."""
    comparable = (
        isinstance(expected, torch.Tensor)
        and isinstance(actual, torch.Tensor)
        and expected.shape == actual.shape
        and expected.dtype == actual.dtype
        and expected.device == actual.device
        and expected.layout == actual.layout == torch.strided
    )
    if not comparable:
        if not isinstance(expected, torch.Tensor) and not isinstance(actual, torch.Tensor):
            return f"eager {expected!r}, {label} {actual!r}"
        return str(error).strip().splitlines()[0]  # assert_close names the attribute
    wide = torch.complex128 if expected.is_complex() else torch.float64
    want = expected.detach().to("cpu", wide)
    got = actual.detach().to("cpu", wide)
    agree = (want == got) | (want.isnan() & got.isnan())
    abs_error = torch.where(agree, 0.0, (got - want).abs())
    nonzero = (want != 0) & want.isfinite()
    rel_error = torch.where(nonzero, abs_error / torch.where(nonzero, want.abs(), 1.0), 0.0)
    beyond = ~torch.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    worst = torch.unravel_index(torch.where(beyond, abs_error, -1.0).argmax(), want.shape)
    worst = tuple(int(i) for i in worst)
    return (
        f"{int(beyond.sum())} of {want.numel()} elements beyond rtol={rtol:g}, atol={atol:g}"
        f" (shape {tuple(expected.shape)}, {expected.dtype})\n"
        f"max abs error {float(abs_error.max()):.3g}, max rel error {float(rel_error.max()):.3g}; "
        f"worst at index {worst}: eager={number(expected[worst])} {label}={number(actual[worst])}"
    )


def tolerance(expected, rtol, atol):
    """The saved rtol/atol; where one is None, assert_close's default for the dtype.

    Integers and bools always compare exactly, as in the check.
    """
    if isinstance(expected, torch.Tensor):
        inexact = expected.is_floating_point() or expected.is_complex()
        dtype = expected.dtype
    else:  # Python numbers compare as float64 / complex128 / exactly
        inexact = isinstance(expected, (float, complex))
        dtype = torch.complex128 if isinstance(expected, complex) else torch.float64
    if not inexact:
        return 0.0, 0.0
    default_rtol, default_atol = DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))
    return (default_rtol if rtol is None else rtol, default_atol if atol is None else atol)


def named_user_inputs(exported, args, kwargs):
    """{user input name: the caller's leaf}, the names of exported.graph_signature.

    torch.export orders keyword inputs as its in_spec says, not as the caller wrote them.
    """
    in_spec = exported.call_spec.in_spec
    if in_spec is not None and in_spec.num_children == 2:
        kwargs_spec = in_spec.child(1) if hasattr(in_spec, "child") else in_spec.children_specs[1]
        if kwargs_spec.context is not None:
            kwargs = {name: kwargs[name] for name in kwargs_spec.context if name in kwargs}
    leaves = pytree.tree_leaves((tuple(args), kwargs))
    names = [
        spec.arg.name
        for spec in exported.graph_signature.input_specs
        if spec.kind == InputKind.USER_INPUT
    ]
    if len(names) != len(leaves):
        raise ValueError(f"the program takes inputs {names}, but {len(leaves)} were saved")
    return dict(zip(names, leaves))


def clone(tree):
    return pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, tree)


def number(element):
    value = element.item()
    return f"{value:.9g}" if isinstance(value, float) else repr(value)


def describe_tolerance(rtol, atol):
    if rtol is None and atol is None:
        return "tolerance: torch.testing.assert_close's defaults for each dtype"
    rtol = "default for the dtype" if rtol is None else f"{rtol:g}"
    atol = "default for the dtype" if atol is None else f"{atol:g}"
    return f"tolerance: rtol={rtol}, atol={atol}"


def plural(count, one, many):
    return f"{count} {one if count == 1 else many}"


def device_available(device):
    if device.type == "cpu":
        return True
    backend = getattr(torch, device.type, None)
    return backend is not None and backend.is_available()


if __name__ == "__main__":
    sys.exit(main())
'''
"""The text of ``repro.py``; it reads everything else from the files beside it."""
