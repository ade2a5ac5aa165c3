"""The golden check: a passing check's record written (``--aoti-golden-update``) or compared
(``--aoti-golden``) with three answers on the recorded inputs:

(a) the recorded package, loaded under this torch in the engine child (a package another
torch made may crash the process that loads it), against the recorded engine: bit for bit on
the same torch build and machine identity, else within the recorded tolerance;
(b) this torch's eager against the recorded eager (a numerics change of torch itself);
(c) this run's engine against the recorded engine (a new compile that answers otherwise).

It runs last, after every other check passed: only a passing check is recorded.
"""

from __future__ import annotations

import datetime
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.utils._pytree as pytree

from pytest_aoti.api import (
    AotiCheckError,
    AotiProgram,
    CheckContext,
    CheckPlan,
    Finding,
    Outcome,
    Phase,
    ProgramCall,
    RecordPart,
    session_of,
)
from pytest_aoti.golden.feature import GOLDEN_KIND, UPDATE_FLAG, GoldenSettings
from pytest_aoti.golden.package import FleetStore, recorded_package
from pytest_aoti.golden.records import (
    MANIFEST,
    PACKAGE,
    SCHEMA,
    TENSOR_FILES,
    VERSION,
    GoldenRecord,
    RecordProblem,
    file_digest,
    folder_name,
    read_record,
    write_record,
)

PACKAGE_SECONDS = 300.0
"""Seconds the engine child may take to load the recorded package and answer once."""
_COUNTS: pytest.StashKey[dict[str, int]] = pytest.StashKey()
"""Per test item: golden checks so far by label (the check index of the next)."""


class GoldenCheck:
    """A passing check's golden record, written or compared."""

    name = "golden"
    phase: Phase = "engine"

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        settings = _settings(context)
        # a program that draws random numbers answers differently on every call
        return settings is not None and bool(settings.golden) and not context.random_ops

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        __tracebackhide__ = True
        settings = _settings(context)
        assert settings is not None and settings.golden and context.item is not None
        root = Path(settings.golden)
        label = _label(context)
        folder = root / folder_name(label)
        if settings.golden_update:
            return _record(plan, context, root, folder, label, settings.golden_package_limit)
        if not (folder / MANIFEST).exists():
            raise AotiCheckError(
                Finding.plain(
                    GOLDEN_KIND,
                    f"no golden record of this check in {root}\n"
                    f"record it: pytest --aoti-golden={root} {UPDATE_FLAG} "
                    f"'{context.item.nodeid}'",
                )
            )
        try:
            record = read_record(folder)
            return _compare(plan, context, record, label)
        except RecordProblem as problem:
            raise AotiCheckError(
                Finding.plain(GOLDEN_KIND, f"golden record unusable: {problem}")
            ) from None


def _settings(context: CheckContext) -> GoldenSettings | None:
    if context.item is None:
        return None
    try:
        return session_of(context.item.config).settings.of(GoldenSettings)
    except (KeyError, LookupError):  # the plugin is blocked: no settings of its own
        return None


def _label(context: CheckContext) -> str:
    """The check's label: its test id (with its layout), then ``#N`` for the Nth check."""
    assert context.item is not None
    counts = context.item.stash.setdefault(_COUNTS, {})
    counts[context.label] = counts.get(context.label, 0) + 1
    index = counts[context.label]
    return context.label if index == 1 else f"{context.label} #{index}"


# --------------------------------------------------------------------------- recording


def _record(
    plan: CheckPlan, context: CheckContext, root: Path, folder: Path, label: str, limit: int
) -> Outcome:
    program = context.program
    args, kwargs = plan.input_sets[0]
    flat = ProgramCall(program.exported).flat(tuple(args), dict(kwargs))
    eager = _one_call(context, plan.module, args, kwargs, eager=True)
    engine = _one_call(context, program.engine_in_exported_state(), args, kwargs)
    names = _output_names(eager[0])
    mutated = sorted(program.mutated_inputs)
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".golden-", dir=root))
    try:
        files = {
            "inputs.pt": _saved(scratch / "inputs.pt", {"flat": _owned(flat)}),
            "eager.pt": _saved(scratch / "eager.pt", _answer(eager, mutated)),
            "engine.pt": _saved(scratch / "engine.pt", _answer(engine, mutated)),
        }
        package = Path(program.package_path)
        size = package.stat().st_size
        kept = size <= limit
        if kept:
            files[PACKAGE] = scratch / PACKAGE
            shutil.copyfile(package, files[PACKAGE])
        manifest = {
            "schema": SCHEMA,
            "version": VERSION,
            "test": context.item.nodeid if context.item is not None else label,
            "label": label,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            **_torch_build(),
            "device": str(program.device),
            **_device_identity(program.device),
            "machine": _machine_identity(),
            "program_key": program.key,
            "inductor_configs": _configs_text(plan),
            "tolerance": _tolerances(plan, eager[0], names),
            "outputs": names,
            "input_names": _tensor_input_names(program, args, kwargs),
            "mutated_inputs": mutated,
            "files": {name: file_digest(files[name]) for name in TENSOR_FILES},
            "package": {
                "sha256": file_digest(package),
                "bytes": size,
                "kept": kept,
                **(
                    {}
                    if kept
                    else {
                        "source": str(_lasting_path(context, program)),
                        "program_key": program.key,
                    }
                ),
            },
        }
        changed = write_record(folder, manifest, files)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    status = "recorded" if changed else "unchanged"
    return Outcome(
        record=RecordPart(
            {
                "golden": {
                    "status": status,
                    "label": label,
                    "folder": str(folder),
                    "recorded_torch": torch.__version__,
                    "torch": torch.__version__,
                }
            }
        )
    )


def _lasting_path(context: CheckContext, program: AotiProgram) -> Path:
    """Where the package outlives this session: its entry in the local cache, where it is
    there; else the path it was loaded from."""
    assert context.item is not None
    store = session_of(context.item.config).stores.store
    entry = store.lookup(program.key) if store is not None else None
    return Path(entry.package_path) if entry is not None else Path(program.package_path)


def _one_call(
    context: CheckContext, function: Any, args: Any, kwargs: Any, *, eager: bool = False
) -> tuple[Any, dict[str, Any]]:
    """One call from the exported state on clones of the inputs: outputs, named inputs after."""
    [(outputs, inputs)] = context.call_history(function, tuple(args), dict(kwargs), 1, eager=eager)
    return outputs, inputs


def _tensor_input_names(program: AotiProgram, args: Any, kwargs: Any) -> list[str]:
    """The names of the tensor inputs, in the order of the flat inputs the engine takes."""
    named = ProgramCall(program.exported).named(tuple(args), dict(kwargs))
    return [name for name, value in named.items() if isinstance(value, torch.Tensor)]


def _answer(call: tuple[Any, dict[str, Any]], mutated: Sequence[str]) -> dict[str, Any]:
    outputs, inputs = call
    return {
        "outputs": _owned(pytree.tree_leaves(outputs)),
        "inputs": {name: _owned(inputs[name]) for name in mutated},
    }


def _owned(value: Any) -> Any:
    """Tensors on the CPU in storage of their own (a view would save its whole base)."""
    return pytree.tree_map(
        lambda leaf: leaf.detach().to("cpu").clone() if isinstance(leaf, torch.Tensor) else leaf,
        value,
    )


def _saved(path: Path, value: Any) -> Path:
    torch.save(value, path)
    return path


def _output_names(outputs: Any) -> list[str]:
    leaves = pytree.tree_flatten_with_path(outputs)[0]
    return [f"output{pytree.keystr(path)}" for path, _ in leaves]


def _tolerances(plan: CheckPlan, outputs: Any, names: Sequence[str]) -> dict[str, list[float]]:
    """The ``[rtol, atol]`` of each floating output leaf, as this check compared it."""
    tolerances: dict[str, list[float]] = {}
    for name, leaf in zip(names, pytree.tree_leaves(outputs)):
        if isinstance(leaf, torch.Tensor) and (leaf.is_floating_point() or leaf.is_complex()):
            rtol, atol = plan.tolerance.resolve(leaf.dtype, name)
            tolerances[name] = [rtol, atol]
    return tolerances


def _torch_build() -> dict[str, Any]:
    return {
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", ""),
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
    }


def _device_identity(device: torch.device) -> dict[str, Any]:
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return {
            "device_name": torch.cuda.get_device_name(index),
            "capability": list(torch.cuda.get_device_capability(index)),
        }
    return {
        "cpu_isa": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
    }


def _machine_identity() -> dict[str, str]:
    return AotiProgram.machine_identity()


def _configs_text(plan: CheckPlan) -> dict[str, str]:
    return {str(key): repr(value) for key, value in plan.inductor_configs.items()}


# --------------------------------------------------------------------------- comparing


def _compare(plan: CheckPlan, context: CheckContext, record: GoldenRecord, label: str) -> Outcome:
    __tracebackhide__ = True
    program = context.program
    manifest = record.manifest
    inputs = load_tensors(record, "inputs.pt")
    recorded_eager = load_tensors(record, "eager.pt")
    recorded_engine = load_tensors(record, "engine.pt")
    args, kwargs = _rebuilt(program, inputs.get("flat"), record)
    exact = same_build(record, program.device)
    recorded_torch = str(manifest["torch"])
    where = (
        f"golden record {record.folder.name} (recorded under torch {recorded_torch}, "
        f"checked under torch {torch.__version__})"
    )
    figures: dict[str, Any] = {}

    assert context.item is not None
    package = _package_answer(program, record, args, kwargs, fleet_store(context.item.config))
    if isinstance(package, str):
        raise package_refused(package, where)
    mutated = _mutated(record)
    eager = _answer(_one_call(context, plan.module, args, kwargs, eager=True), mutated)
    engine = _answer(_one_call(context, program.engine_in_exported_state(), args, kwargs), mutated)
    # each of the three answers against its record, then what moved said once
    answers = {
        "package": (package, recorded_engine, exact),
        "eager": (eager, recorded_eager, False),
        "engine": (engine, recorded_engine, False),
    }
    moved: dict[str, AotiCheckError] = {}
    for name, (answer, recorded, bitwise) in answers.items():
        try:
            figures[name] = differences(answer, recorded, record, exact=bitwise)
        except AotiCheckError as difference:
            moved[name] = difference
    if moved:
        raise _what_moved(moved, program.key, manifest, where)
    return Outcome(
        record=RecordPart(
            {
                "golden": {
                    "status": "matched",
                    "label": label,
                    "folder": str(record.folder),
                    "recorded_torch": recorded_torch,
                    "torch": torch.__version__,
                    "package": "loaded",
                    "bit_for_bit": exact,
                    "max_abs": figures,
                }
            }
        )
    )


def _mutated(record: GoldenRecord) -> list[str]:
    return [str(name) for name in record.manifest["mutated_inputs"]]


def same_build(record: GoldenRecord, device: torch.device) -> bool:
    """Whether this is the torch build, machine identity and device the record was made on
    (then the recorded package must answer bit for bit)."""
    manifest = record.manifest
    return manifest.get("machine") == _machine_identity() and manifest.get("device") == str(device)


def load_tensors(record: GoldenRecord, name: str) -> dict[str, Any]:
    loaded = torch.load(record.verified(name), weights_only=True, map_location="cpu")
    if not isinstance(loaded, dict):
        raise RecordProblem(f"{record.folder / name} does not hold a golden record's tensors")
    return loaded


def _rebuilt(program: AotiProgram, flat: Any, record: GoldenRecord) -> tuple[Any, Any]:
    """The recorded flat inputs as this program's ``(args, kwargs)``, on its device."""
    spec = program.exported.call_spec.in_spec
    if not isinstance(flat, list) or spec is None or spec.num_leaves != len(flat):
        raise AotiCheckError(
            Finding.plain(
                GOLDEN_KIND,
                f"the recorded inputs of golden record {record.folder.name} do not fit this "
                "program (the model's inputs changed): record it again with "
                f"{UPDATE_FLAG}",
                location="inputs",
            )
        )
    moved = [leaf.to(program.device) if isinstance(leaf, torch.Tensor) else leaf for leaf in flat]
    args, kwargs = pytree.tree_unflatten(moved, spec)
    return tuple(args), dict(kwargs)


def fleet_store(config: pytest.Config) -> FleetStore | None:
    """The run's fleet store (``--aoti-cache-url``), where one is set."""
    store: FleetStore | None = session_of(config).stores.remote
    return store


def _package_answer(
    program: AotiProgram, record: GoldenRecord, args: Any, kwargs: Any, fleet: FleetStore | None
) -> dict[str, Any] | str:
    """The recorded package's answer in the engine child, or why there is none."""
    flat = ProgramCall(program.exported).flat(args, kwargs)
    preparation = program.child_preparation()
    return package_answer(
        record,
        [leaf for leaf in flat if isinstance(leaf, torch.Tensor)],
        program.device,
        preparation.request(),
        preparation.path,
        fleet,
    )


def package_refused(why: str, where: str) -> AotiCheckError:
    """The failure of a recorded package that gave no answer under this torch."""
    return AotiCheckError(
        Finding.plain(
            GOLDEN_KIND,
            f"the recorded package does not answer under torch {torch.__version__}: {why}\n{where}",
            location="package",
        )
    )


def package_answer(
    record: GoldenRecord,
    tensors: Sequence[torch.Tensor],
    device: torch.device,
    preparation: Mapping[str, Any] | None = None,
    path: Sequence[str] = (),
    fleet: FleetStore | None = None,
) -> dict[str, Any] | str:
    """The recorded package's answer to ``tensors`` (the flat tensor inputs) in the engine
    child, from its exported state: its output leaves and the inputs it mutated, by name; or
    why there is none (it crashed the child, refused the inputs, or could not load). A
    package kept outside the record may come from ``fleet`` (:mod:`.package`)."""
    with recorded_package(record, fleet) as package:
        request = {
            "package": str(package),
            "device_index": device.index if device.type == "cuda" else None,
            "fresh": True,
            "inputs": [[tensor.to(device) for tensor in tensors]],
            **(preparation or {}),
        }
        result = CheckContext.child_jobs(request, [(0, False)], PACKAGE_SECONDS, path).results()[
            (0, False)
        ]
    for key in ("crashed", "unprepared", "error"):
        if result.get(key):
            return f"{key}: {result[key]}"
    names = [str(name) for name in record.manifest.get("input_names") or ()]
    after = dict(zip(names, result.get("inputs") or []))
    return {
        "outputs": _owned(pytree.tree_leaves(result.get("outputs"))),
        "inputs": {name: _owned(after[name]) for name in _mutated(record) if name in after},
    }


def differences(
    answer: Mapping[str, Any],
    recorded: Mapping[str, Any],
    record: GoldenRecord,
    *,
    exact: bool = False,
) -> float:
    """The largest difference of ``answer`` from ``recorded``; raises the first leaf that
    differs beyond the recorded tolerance (or at all, with ``exact``)."""
    __tracebackhide__ = True
    names = [str(name) for name in record.manifest["outputs"]]
    wanted_outputs = list(recorded.get("outputs") or [])
    got_outputs = list(answer.get("outputs") or [])
    if len(got_outputs) != len(wanted_outputs):
        raise AotiCheckError(
            Finding.plain(
                GOLDEN_KIND,
                f"{len(got_outputs)} output leaves, the record {len(wanted_outputs)}",
                location="output",
            )
        )
    pairs = [
        *zip(names, wanted_outputs, got_outputs),
        *(
            (f"input '{name}'", (recorded.get("inputs") or {}).get(name), value)
            for name, value in (answer.get("inputs") or {}).items()
        ),
    ]
    tolerances = record.manifest["tolerance"]
    largest = 0.0
    for location, want, got in pairs:
        if not isinstance(want, torch.Tensor) or not isinstance(got, torch.Tensor):
            if want != got:
                raise _leaf_differs(location, f"recorded {want!r}, now {got!r}")
            continue
        got = got.detach().to("cpu")
        if want.shape != got.shape or want.dtype != got.dtype:
            raise _leaf_differs(
                location,
                f"recorded {tuple(want.shape)} {want.dtype}, now {tuple(got.shape)} {got.dtype}",
            )
        if want.is_floating_point() or want.is_complex():
            difference = (want.to(torch.float64) - got.to(torch.float64)).abs().nan_to_num(0.0)
            largest = max(largest, float(difference.max()) if difference.numel() else 0.0)
        rtol, atol = (0.0, 0.0) if exact else tuple(tolerances.get(location, (0.0, 0.0)))
        try:
            torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as error:
            detail = [line.strip() for line in str(error).splitlines() if line.strip()][1:4]
            bound = "bit for bit" if exact else f"rtol={rtol:.3g}, atol={atol:.3g}"
            raise _leaf_differs(location, f"beyond {bound}: " + "; ".join(detail)) from None
    return largest


def _leaf_differs(location: str, figures: str) -> AotiCheckError:
    return AotiCheckError(Finding.plain(GOLDEN_KIND, figures, location=location))


_WHO = {
    "package": "the recorded package (loaded under this torch)",
    "eager": "this torch's eager",
    "engine": "this run's engine",
}


def _what_moved(
    moved: Mapping[str, AotiCheckError], key: str, manifest: Mapping[str, Any], where: str
) -> AotiCheckError:
    """One finding for the answers that differ from the record, saying which moved and what
    that points to."""
    first = next(iter(moved.values())).finding
    if "package" in moved:
        cause = "the runtime answers the shipped package otherwise: an upgrade that changes it"
    elif "eager" in moved and "engine" in moved:
        cause = (
            "the model changed since the record"
            if manifest.get("program_key") != key
            else "this torch's numerics changed, in eager and in the compile alike"
        )
    elif "eager" in moved:
        cause = "this torch's eager changed its numerics (a change of torch itself)"
    else:
        cause = "this torch compiles the program to an engine that answers otherwise"
    who = " and ".join(_WHO[name] for name in moved)
    lines = [
        f"{who} answer{'' if len(moved) > 1 else 's'} {first.location or 'an output'} "
        f"otherwise than recorded: {cause}",
        where,
        *(f"{_WHO[name]}: {error.finding.message}" for name, error in moved.items()),
        f"if the change is intended, record again: {UPDATE_FLAG}",
    ]
    return AotiCheckError(Finding.plain(GOLDEN_KIND, "\n".join(lines), location=first.location))
