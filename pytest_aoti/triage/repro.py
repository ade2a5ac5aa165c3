"""A self-contained repro bundle for a failed ``aoti.check``, runnable with plain torch.

``--aoti-keep-failed=DIR`` writes one folder per failing check with :func:`write_bundle`:
the exported program, the compiled package, the failing inputs, what eager PyTorch
produced, and ``repro.py``, which replays the engine (and the exported and decomposed
programs) against eager's saved results without pytest, pytest-aoti or the model's own
library (programs and results are saved flat, see :mod:`pytest_aoti.triage.flat`). It is
meant for whoever fixes the compiler, on a machine that has only torch. Only failures that
``repro.py`` can reproduce get one (:func:`reproduces`). ``repro.py`` is the module
:mod:`pytest_aoti.triage.repro_script`, copied as it is (:data:`REPRO_SCRIPT_FILE`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.utils._pytree as pytree

import pytest_aoti.triage.repro_script as repro_script
from pytest_aoti.api import AotiProgram, FindingKind, InputBuilder
from pytest_aoti.triage.flat import flat_inputs, flat_program, flat_results, tree_text

__all__ = ["REPRO_SCRIPT_FILE", "reproduces", "write_bundle"]

if TYPE_CHECKING:
    from torch.export import ExportedProgram

    from pytest_aoti.api import BundleAdapter

REPRO_SCRIPT_FILE = Path(repro_script.__file__)
"""The bundle's ``repro.py``: the source file of :mod:`pytest_aoti.triage.repro_script`."""


def reproduces(
    finding_json: Mapping[str, Any],
    mutated_inputs: Iterable[str] = (),
    mutated_buffers: Iterable[str] = (),
    adapter: BundleAdapter | None = None,
) -> dict[str, str] | None:
    """The ``{"kind", "location"}`` that ``repro.py`` would reproduce for a finding, or None
    where it cannot reproduce that kind of failure (see ``FindingKind.reproducible``).

    A finding of a feature's own kind is first turned by the feature's ``adapter`` into
    the finding the bundle reproduces (a generated shape's into the difference found on
    it). Then a stateful program's output or input that diverges after its first call
    (kind ``buffer``, located at the output or input) reproduces as that difference; a
    registered buffer the program mutates that the engine holds wrong as that buffer's
    difference (a buffer the program does not record as mutated is no engine's
    difference: no bundle); an engine that killed its process by a signal as that signal
    (``location`` ``SIGABRT``).
    """
    if adapter is not None:
        target = adapter.target(finding_json)
        if target is None:
            return None
        finding_json = target
    kind = str(finding_json.get("kind", ""))
    location = str(finding_json.get("location") or "")
    if kind == FindingKind.BUFFER and location.startswith("output"):
        kind = FindingKind.OUTPUT.value
    elif kind == FindingKind.BUFFER and location.startswith("input '"):
        name = location.removeprefix("input '").removesuffix("'")
        mutated = name in set(mutated_inputs)
        kind = (FindingKind.MUTATED_INPUT if mutated else FindingKind.UNTOUCHED_INPUT).value
    elif kind == FindingKind.BUFFER:
        name = location.removeprefix("buffer '").removesuffix("'")
        if not location.startswith("buffer '") or name not in set(mutated_buffers):
            return None
    if kind == FindingKind.CRASH and not location.startswith(("SIG", "signal ")):
        return None  # a hang or a CUDA error: the replay's exit status cannot tell it
    if not FindingKind(kind).reproducible:
        return None
    return {"kind": kind, "location": location}


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
    mutated_inputs: Iterable[str] | None = None,
    eager_buffers: Sequence[Mapping[str, Any]] | None = None,
    custom_op_modules: Sequence[tuple[str, str]] = (),
    weights: Mapping[str, torch.Tensor] | None = None,
    step_inputs: Sequence[tuple[tuple[Any, ...], Mapping[str, Any]]] | None = None,
    adapter: BundleAdapter | None = None,
) -> Path:
    """Write a repro bundle for one failed check into ``directory``; return its ``repro.py``.

    ``directory`` is created (its parent must exist); an existing one is emptied first.
    ``exported`` is the program ``torch.export.export`` returned, before decomposition;
    ``args`` / ``kwargs`` the inputs as the check gave them to the engine before its first
    call; ``eager_results`` one ``(outputs, {input name: tensor after the call})`` pytree
    per call, for every tensor user input. ``rtol`` / ``atol`` of ``None`` mean
    ``torch.testing.assert_close``'s defaults for the dtype. ``device`` is the device the
    package was compiled for; by default that of the first input tensor (else of the
    program's state, else CPU). ``mutated_inputs`` names the inputs the compiled program
    mutates (by default read from ``exported.run_decompositions()``). ``finding_json``'s
    ``kind`` and ``location`` are what ``repro.py`` must see again to exit 1.
    ``eager_buffers``: for a program that mutates registered buffers, eager's buffers after
    each call (``{name: tensor}`` per call), compared with the engine's read back.
    ``custom_op_modules``: ``(name, file)`` of the modules that registered its custom ops.
    ``weights``: the weight set eager held (``weights.pt``), loaded by ``repro.py`` first.
    ``step_inputs``: a decode loop's ``(args, kwargs)`` of each call (``steps.pt``).
    ``adapter``: that of the feature whose kind the finding is (its target, its files).

    The folder holds ``exported.pt2``, ``package.pt2``, ``inputs.pt``, ``eager.pt``,
    ``finding.txt``, ``finding.json``, ``check.json`` and ``repro.py`` (``steps.pt`` and the
    states where the failure has them): nothing in it needs more than torch to load (and the
    files that registered the engine's custom ops).
    """
    for given, name in ((eager_results, "eager results"), (step_inputs, "step inputs")):
        if calls < 1 or (given is not None and len(given) != calls):
            raise ValueError(f"{calls} calls need {calls} {name}, got {len(given or ())}")
    _fresh_directory(directory)
    # clones: a view would save its whole storage; the check ran on clones too (no input
    # aliases another)
    inputs = InputBuilder.clone_tree({"args": tuple(args), "kwargs": dict(kwargs)})
    where = torch.device(device) if device is not None else _device_of(exported, inputs)
    mutated_inputs = sorted(_mutated_by(exported) if mutated_inputs is None else mutated_inputs)
    buffer_names = sorted(eager_buffers[0]) if eager_buffers else []
    results, output_names = flat_results(InputBuilder.clone_tree(list(eager_results)))
    (directory / "finding.txt").write_text(finding_text.rstrip("\n") + "\n", encoding="utf-8")
    _write_json(directory / "finding.json", finding_json)
    check = {
        "calls": calls,
        "rtol": rtol,
        "atol": atol,
        "device": str(where),
        "torch": torch.__version__,
        "reproduces": reproduces(finding_json, mutated_inputs, buffer_names, adapter),
        "outputs": output_names,
        "mutated_inputs": mutated_inputs,
    }
    _write_json(
        directory / "check.json",
        {**check, **_check_extras(exported, buffer_names, weights, step_inputs, custom_op_modules)},
    )
    flat = flat_inputs(exported, inputs["args"], inputs["kwargs"])
    torch.save({"args": tuple(flat), "kwargs": {}}, directory / "inputs.pt")
    torch.save(results, directory / "eager.pt")
    _write_steps(directory, exported, step_inputs)
    _write_states(directory, eager_buffers, weights)
    if adapter is not None and adapter.files is not None:
        adapter.files(finding_json, directory)
    return _write_programs(directory, exported, package_path)


def _check_extras(
    exported: ExportedProgram,
    buffer_names: Sequence[str],
    weights: Mapping[str, torch.Tensor] | None,
    step_inputs: Sequence[Any] | None,
    custom_op_modules: Sequence[tuple[str, str]],
) -> dict[str, Any]:
    """check.json's keys beyond the calls and their comparison: the states and the custom
    ops where the failure has them, and the trees of the inputs and outputs."""
    spec = exported.call_spec
    return {
        **({"buffers": list(buffer_names)} if buffer_names else {}),
        **({"weights": sorted(weights)} if weights else {}),
        **({"steps": True} if step_inputs is not None else {}),
        **(
            {"custom_op_modules": [list(m) for m in custom_op_modules]} if custom_op_modules else {}
        ),
        "input_tree": tree_text(spec.in_spec),
        "output_tree": tree_text(spec.out_spec),
    }


def _write_steps(
    directory: Path,
    exported: ExportedProgram,
    step_inputs: Sequence[tuple[tuple[Any, ...], Mapping[str, Any]]] | None,
) -> None:
    """``steps.pt``: a decode loop's flat inputs of each call, cloned as the first call's are."""
    if step_inputs is not None:
        steps = [
            tuple(flat_inputs(exported, *InputBuilder.clone_tree((tuple(a), dict(k)))))
            for a, k in step_inputs
        ]
        torch.save(steps, directory / "steps.pt")


def _write_states(
    directory: Path,
    eager_buffers: Sequence[Mapping[str, Any]] | None,
    weights: Mapping[str, torch.Tensor] | None,
) -> None:
    """``eager_buffers.pt`` and ``weights.pt``, where the failure has them."""
    if eager_buffers:
        torch.save(InputBuilder.clone_tree(list(eager_buffers)), directory / "eager_buffers.pt")
    if weights:  # each in a storage of its own: the loader copies a constant's whole storage
        owned = {name: tensor.detach().clone() for name, tensor in weights.items()}
        torch.save(owned, directory / "weights.pt")


def _mutated_by(exported: ExportedProgram) -> Iterable[str]:
    """The user inputs the compiled (decomposed) program mutates."""
    with AotiProgram.quiet_torch_deprecations():
        signature = exported.run_decompositions().graph_signature
    names: Iterable[str] = signature.user_inputs_to_mutate.values()
    return names


def _write_programs(directory: Path, exported: ExportedProgram, package_path: Path) -> Path:
    """The package, the exported program (flat) and ``repro.py``; return ``repro.py``."""
    shutil.copyfile(package_path, directory / "package.pt2")
    with AotiProgram.quiet_torch_deprecations():
        torch.export.save(flat_program(exported), directory / "exported.pt2")
    script = directory / "repro.py"
    shutil.copyfile(REPRO_SCRIPT_FILE, script)
    return script


def _fresh_directory(directory: Path) -> None:
    """``directory`` created empty: an existing one (or a file there) is removed first."""
    if directory.is_symlink() or directory.is_file():
        directory.unlink()
    elif directory.exists():
        shutil.rmtree(directory)
    directory.mkdir()


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    # default=str: a finding may carry a dtype or a device; the file is for reading
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")


def _device_of(exported: ExportedProgram, inputs: Any) -> torch.device:
    state = [*exported.state_dict.values(), *exported.constants.values()]
    for leaf in [*pytree.tree_leaves(inputs), *state]:
        if isinstance(leaf, torch.Tensor):
            return leaf.device
    return torch.device("cpu")
