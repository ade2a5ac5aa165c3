"""Reproduce an AOTInductor engine that differs from eager PyTorch, found by pytest-aoti.

Run it with torch alone (no pytest, no pytest-aoti, no model library such as transformers),
in any directory, even in isolated mode:

    python -I repro.py

The programs are saved with flat inputs and outputs (a tuple of leaves each; the graph is
the same), so a model whose outputs are library types (a transformers ModelOutput, a
DynamicCache) loads without that library. check.json keeps the original tree structure
as text, for reading. The files beside this script:

    exported.pt2   the program torch.export.export returned (before run_decompositions)
    package.pt2    the AOTInductor package compiled from it (aoti_compile_and_package)
    inputs.pt      the failing inputs as flat leaves, in the program's order: {"args": (...)}
    eager.pt       what eager PyTorch (the original module) produced, one entry per call:
                   ([output leaves], {input name: that input tensor after the call})
    eager_buffers.pt  for a program that mutates registered buffers: eager's buffers after
                   each call, one {buffer name: tensor} per call
    weights.pt     for a failed weight swap: the new weights eager held, {state-dict name:
                   tensor}; loaded into the engine (load_constants, every name the engine
                   lists in get_constant_fqns()) and into the exported and decomposed
                   programs (load_state_dict) before their calls
    check.json     calls, rtol and atol (null: torch.testing.assert_close's defaults for the
                   dtype), the device, the torch version that wrote the bundle, the names of
                   the output leaves, the inputs the program mutates, the tree structure,
                   and the finding to reproduce (its kind and location)
    finding.txt    the failure as pytest-aoti reported it (finding.json: the same as data)

It runs the engine `calls` times on its own copy of the inputs: inputs the program mutates
are written in place and the same copy is used again by the next call, as in the check.
After each call it compares the outputs and every tensor input with eager's, using
torch.testing.assert_close, and prints each leaf that differs. A program that mutates
registered buffers runs in torch's own AOTI runner instead (the same compiled library, from
the package extracted into a temporary folder), whose buffers are read back and compared
with eager's after each call too. It then does the same with the exported program
(exported.module(), no compile) and the decomposed one
(run_decompositions().module()), which tells where the difference comes from: export,
decomposition, or the AOTInductor compile itself.

Exit status:
    1      REPRODUCED: the engine shows the reported finding again (same kind, same location)
    128+N  REPRODUCED, for an engine reported to kill its process by signal N: it did again
    0      NOT REPRODUCED: it does not (other differences, if any, are printed)
    2      COULD NOT RUN: torch is not importable, a file is missing or unreadable, the
           device is absent, loading or calling the engine raised (python repro.py
           --traceback shows where)
    128+N  otherwise: the replay died of signal N (e.g. 139: SIGSEGV inside the engine), said
           on stderr

The replay runs in a child process, so that an engine that kills its process is reported
rather than mistaken for an exit status; python repro.py --in-process runs it in this one
(for a debugger).
"""
# In pytest-aoti this file is pytest_aoti/repro_script.py, copied into each bundle as
# it is. It imports torch and the standard library only, torch inside the functions that use
# it, so that a Python without torch still gets to say so (exit 2). pytest-aoti imports two
# parts of it: assert_close's default tolerances and the reading of an engine's buffers
# through torch's own AOTI runner, so that the bundle and the check judge alike.

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
import warnings
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram

HERE = Path(__file__).resolve().parent
FILES = ("check.json", "finding.txt", "exported.pt2", "package.pt2", "inputs.pt", "eager.pt")
SCRATCH = "PYTEST_AOTI_REPRO_SCRATCH"  # the supervisor's folder for the child's temporary files

Mismatch = tuple[str, str, str]
"""(kind, location, text): kind "output", "mutated input", "untouched input", "buffer" or
"raised"; location as pytest-aoti names it (``output``, ``input 'x'``, ``buffer 'b'``)."""


# --------------------------------------------------------------------------- the supervisor


def interpreter_flags() -> list[str]:
    """This interpreter's flags (-I, -S, -E, -s, -B, -P, -O), for the child to run as it does."""
    flags = sys.flags
    switches = (
        ("-I", flags.isolated),
        ("-S", flags.no_site),
        ("-E", flags.ignore_environment and not flags.isolated),
        ("-s", flags.no_user_site and not flags.isolated),
        ("-B", flags.dont_write_bytecode),
        ("-P", getattr(flags, "safe_path", False) and not flags.isolated),
    )
    return [flag for flag, on in switches if on] + ["-O"] * flags.optimize


def could_not_run_here() -> str:
    """Why the replay cannot start (torch missing, a file missing), or "" when it can."""
    if importlib.util.find_spec("torch") is None:
        return (
            f"torch is not importable by {sys.executable} (flags: "
            f"{' '.join(interpreter_flags()) or 'none'}): run this bundle with a Python "
            "that has torch installed"
        )
    missing = [name for name in FILES if not (HERE / name).is_file()]
    if missing:
        return (
            f"{', '.join(missing)} missing from the bundle {HERE}: copy the whole bundle directory"
        )
    return ""


def supervise() -> int:
    """Run the replay in a child process; report a death by a signal as such."""
    reason = could_not_run_here()
    if reason:
        print(f"COULD NOT RUN: {reason}", file=sys.stderr)
        return 2
    # the child's temporary files go in a folder of the supervisor's, removed here even
    # when a signal ends the child (its own atexit clean-up never runs then)
    scratch = tempfile.mkdtemp(prefix="repro-")
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))
    try:
        child = subprocess.run(
            [sys.executable, *interpreter_flags(), __file__, "--in-process", *sys.argv[1:]],
            env={**os.environ, SCRATCH: scratch},
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if child.returncode >= 0:
        return child.returncode
    number = -child.returncode
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    if reported_crash() == name:
        print(f"REPRODUCED: the AOTI engine crashed its process ({name}), as reported.")
        return 128 + number
    print(
        f"DIED: the replay was killed by {name} ({number}), most likely inside the engine: "
        f"python repro.py --in-process runs it under a debugger",
        file=sys.stderr,
    )
    return 128 + number


def reported_crash() -> str:
    """The signal the engine was reported to die of (``SIGABRT``); "" for another finding."""
    try:
        check = json.loads((HERE / "check.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    target = check.get("reproduces") or {} if isinstance(check, dict) else {}
    return str(target.get("location") or "") if target.get("kind") == "crash" else ""


# ------------------------------------------------- assert_close's defaults (pytest-aoti's too)

DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
    "complex32": (1e-3, 1e-5),
    "complex64": (1.3e-6, 1e-5),
    "complex128": (1e-7, 1e-7),
    # quantized tensors compare dequantized, with float32's tolerance
    "quint8": (1.3e-6, 1e-5),
    "quint2x4": (1.3e-6, 1e-5),
    "quint4x2": (1.3e-6, 1e-5),
    "qint8": (1.3e-6, 1e-5),
    "qint32": (1.3e-6, 1e-5),
}
"""``torch.testing.assert_close``'s default ``(rtol, atol)`` per dtype, by the dtype's name
(``_DTYPE_PRECISIONS`` of ``torch/testing/_comparison.py``); other dtypes compare exactly."""


def default_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """``assert_close``'s ``(rtol, atol)`` for ``dtype``: torch's own answer where its private
    helper is where it was, else :data:`DEFAULT_TOLERANCES`."""
    try:
        from torch.testing._comparison import default_tolerances
    except ImportError:
        return DEFAULT_TOLERANCES.get(str(dtype).removeprefix("torch."), (0.0, 0.0))
    rtol, atol = default_tolerances(dtype)
    return float(rtol), float(atol)


# ---------------------------------- an engine's buffers, read back (pytest-aoti's read-back too)

RUNNERS = {"cpu": "AOTIModelContainerRunnerCpu", "cuda": "AOTIModelContainerRunnerCuda"}
"""The runner class of ``torch._C._aoti`` for each device type that has one."""


def aoti_runner_class(device_type: str) -> Any:
    """torch's private AOTI runner class for ``device_type``; None where this torch has none."""
    import torch

    return getattr(getattr(torch._C, "_aoti", None), RUNNERS.get(device_type, ""), None)


def extract_model_library(package: Path, target: Path) -> Path | str:
    """Extract the model's compiled library (``*.wrapper.so``) of the AOTInductor package
    ``package`` and the files beside it into ``target`` (a file already there is kept);
    return the library's path, or a sentence saying why it cannot be read back alone.

    Raises ``ValueError`` for a member name that would land outside ``target``, ``OSError``
    or ``zipfile.BadZipFile`` for a package that cannot be read.
    """
    with zipfile.ZipFile(package) as archive:
        members = archive.namelist()
        for member in members:  # nothing may land outside the folder
            if ".." in PurePosixPath(member).parts or member.startswith("/"):
                raise ValueError(f"unsafe member name {member!r}")
        libraries = [m for m in members if _in_model(m) and m.endswith(".wrapper.so")]
        if len(libraries) != 1:
            return "the package holds no single compiled model library"
        if any("/data/weights/" in f"/{m}" or "/data/constants/" in f"/{m}" for m in members):
            # package_constants_in_so=False: the library alone starts with no weights
            return "the package keeps its weights outside its compiled library"
        model_dir = PurePosixPath(libraries[0]).parent
        for member in members:
            if PurePosixPath(member).parent == model_dir and not (target / member).exists():
                archive.extract(member, target)
    return target / libraries[0]


def _in_model(member: str) -> bool:
    return "/data/aotinductor/model/" in f"/{member}"


class LibraryRunner:
    """A package's compiled library in torch's own AOTI runner: a second instance of the
    engine's code, called with the same flat tensors, whose registered buffers can be read
    after each call (``extract_constants_map``). ``runner_class`` is
    :func:`aoti_runner_class`'s; its constructor raises where it cannot load the library."""

    def __init__(self, runner_class: Any, library: Path, device: torch.device) -> None:
        if device.type == "cuda":
            # the kernels' cubin files sit beside the library; the runner needs the device
            self.runner = runner_class(str(library), 1, str(device), str(library.parent))
        else:
            self.runner = runner_class(str(library), 1)
        self.fqns: dict[str, str] = dict(self.runner.get_constant_names_to_original_fqns())

    def __call__(self, *leaves: Any) -> list[torch.Tensor]:
        """One call on the tensors among ``leaves``, in order; the flat outputs."""
        import torch

        return list(self.runner.run([x for x in leaves if isinstance(x, torch.Tensor)]))

    def buffers(self, names: Iterable[str] | None = None) -> dict[str, torch.Tensor]:
        """Clones of the named buffers (module FQNs; all of them without ``names``) as the
        library holds them now; a name it does not hold is missing from the result."""
        constants = self.runner.extract_constants_map(False)
        by_fqn = {self.fqns.get(name, name): value for name, value in constants.items()}
        wanted = list(by_fqn) if names is None else [name for name in names if name in by_fqn]
        # the runner hands out views of its own buffers: the next call would change them
        return {name: by_fqn[name].detach().clone() for name in wanted}


# --------------------------------------------------------------------------- the replay


class CouldNotRun(Exception):
    """The bundle cannot be replayed here (not the reproduced finding)."""


def main() -> int:
    # torch's notices about its own internals (run_decompositions copies deprecated tree specs)
    warnings.filterwarnings("ignore", category=FutureWarning)
    try:
        return replay_bundle()
    except Exception as error:
        first = str(error).strip().splitlines()
        reason = f"{type(error).__name__}: {first[0]}" if first else type(error).__name__
        if isinstance(error, CouldNotRun):
            reason = str(error)
        print(f"COULD NOT RUN: {reason}", file=sys.stderr)
        if "--traceback" in sys.argv[1:]:
            traceback.print_exc()
        elif not isinstance(error, CouldNotRun):
            print("(python repro.py --traceback shows where)", file=sys.stderr)
        return 2


def replay_bundle() -> int:
    """Replay the engine, the exported and the decomposed program; the exit status."""
    reason = could_not_run_here()
    if reason:
        raise CouldNotRun(reason)
    try:  # said here, before any file is read
        importlib.import_module("torch")
    except ImportError as error:
        raise CouldNotRun(f"torch does not import here: {error}") from error
    bundle = read_bundle()
    # each program is loaded afresh: running one mutates the buffers it shares with the file's
    # program object, and every replay must start from the exported state, as eager did
    engine_mismatches = replay(bundle, "AOTI engine", "engine", bundle.engine)
    raised = [text for kind, _, text in engine_mismatches if kind == "raised"]
    if raised:
        raise CouldNotRun(f"the engine raised, which is not the reported finding: {raised[0]}")
    title = "exported program (exported.module())"
    exported = holding(load_exported().module(), bundle.weights, "exported")
    export_differs = bool(replay(bundle, title, "exported", exported))
    try:
        decomposed = load_exported().run_decompositions().module()
    except Exception as error:
        print(f"\nrun_decompositions() failed: {type(error).__name__}: {error}")
        decompose_differs = None
    else:
        title = "decomposed program (run_decompositions().module())"
        decomposed = holding(decomposed, bundle.weights, "decomposed")
        decompose_differs = bool(replay(bundle, title, "decomposed", decomposed))
    print()
    target = bundle.check.get("reproduces") or {}
    if not reproduced(target, engine_mismatches, export_differs):
        return 0
    print(f"REPRODUCED: the AOTI engine differs from eager ({what_was_reported(target)}).")
    print(which_stage(export_differs, decompose_differs))
    return 1


@dataclass
class Bundle:
    """What the files beside this script hold, loaded, and the engine to replay."""

    check: dict[str, Any]
    exported: ExportedProgram
    engine: Callable[..., Any]
    inputs: dict[str, Any]
    eager: list[Any]
    buffers: list[dict[str, Any]] | None
    weights: dict[str, Any] | None = None
    steps: list[tuple[Any, ...]] | None = None
    """A decode loop's flat inputs of each call (steps.pt), else None."""


def read_bundle() -> Bundle:
    """Read check.json, say what is replayed, load the programs, inputs and eager's results."""
    import torch

    check = json.loads((HERE / "check.json").read_text())
    calls, rtol, atol = check["calls"], check["rtol"], check["atol"]
    device = torch.device(check["device"])
    if not device_available(device):
        raise CouldNotRun(
            f"the package was compiled for {device}, which this machine does not have: "
            f"run this bundle where torch.{device.type}.is_available()"
        )
    finding = (HERE / "finding.txt").read_text().splitlines()
    print(f"pytest-aoti reported: {finding[0] if finding else '(finding.txt is empty)'}")
    print(f"torch {torch.__version__}, device {device}; bundle written by torch {check['torch']}")
    stepped = " of a decode loop, each on its step's inputs" if check.get("steps") else ""
    print(f"{plural(calls, 'call', 'calls')}{stepped}; {describe_tolerance(rtol, atol)}")

    register_custom_ops(check.get("custom_op_modules") or [])
    exported = load_exported()
    weights = None
    if check.get("weights"):  # each on the device it was swapped on
        weights = torch.load(bundle_file("weights.pt"), weights_only=True)
        if check.get("buffers"):
            raise CouldNotRun("a weight set for a program that mutates buffers is not replayed")
    engine = load_engine(device, weights)
    # these files were written by pytest-aoti next to a compiled shared library, which runs
    # native code anyway: trust the bundle as a whole, or do not run it
    inputs = torch.load(HERE / "inputs.pt", map_location=device, weights_only=False)
    eager = torch.load(HERE / "eager.pt", map_location=device, weights_only=False)
    buffers = None
    if check.get("buffers"):
        path = bundle_file("eager_buffers.pt")
        buffers = torch.load(path, map_location=device, weights_only=False)
        engine = buffer_runner(device)
    steps = None
    if check.get("steps"):
        steps = torch.load(bundle_file("steps.pt"), map_location=device, weights_only=False)
    return Bundle(check, exported, engine, inputs, eager, buffers, weights, steps)


def bundle_file(name: str) -> Path:
    """The bundle's file ``name``, which check.json says it holds."""
    path = HERE / name
    if not path.is_file():
        raise CouldNotRun(f"{name} missing from the bundle {HERE}: copy the whole bundle directory")
    return path


def register_custom_ops(modules: Sequence[Sequence[str]]) -> None:
    """Import the modules that registered the custom ops the engine calls (their files on
    the machine that wrote the bundle): the engine calls those ops by name."""
    for name, file in modules:
        if not Path(file).is_file():
            raise CouldNotRun(
                f"the engine calls a custom op registered by {file}, which is not here: "
                "run the bundle where that file is"
            )
        print(f"custom ops: importing {file}")
        sys.path.insert(0, str(Path(file).parent))
        spec = importlib.util.spec_from_file_location(name, file)
        if spec is None or spec.loader is None:
            raise CouldNotRun(f"cannot import {file}, which registers the engine's custom ops")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)


def load_exported() -> ExportedProgram:
    import torch

    return torch.export.load(HERE / "exported.pt2")


def load_engine(
    device: torch.device, weights: Mapping[str, Any] | None = None
) -> Callable[..., list[Any]]:
    """package.pt2 loaded by aoti_load_package, holding ``weights`` (see :func:`load_weights`),
    called with the flat tensors of a call."""
    import torch
    import torch._inductor

    load_options: dict[str, Any] = {}
    if device.type == "cuda" and device.index is not None:
        load_options["device_index"] = device.index
    try:
        package: Any = torch._inductor.aoti_load_package(str(HERE / "package.pt2"), **load_options)
    except Exception as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise CouldNotRun(f"package.pt2 does not load: {first}") from error
    if weights:
        load_weights(package, weights)

    def engine(*leaves: Any) -> list[Any]:
        # the package's own call would rebuild the model's output types from their names;
        # the flat run needs none of them
        tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
        return list(package.loader.boxed_run(tensors))

    return engine


def load_weights(package: Any, weights: Mapping[str, Any]) -> None:
    """Load the weight set into the engine as a server would: every name the engine lists
    (get_constant_fqns()) at once, else one by one; say which it keeps compiled."""
    listed = set(package.get_constant_fqns())
    taken = {name: value for name, value in weights.items() if name in listed}
    print(
        f"weights.pt: {plural(len(weights), 'new weight', 'new weights')}, eager held them; "
        f"load_constants loads {len(taken)} into the engine"
    )
    unlisted = sorted(set(weights) - listed)
    if unlisted:
        print(
            "  not among the engine's constants, so it keeps their compiled values: "
            + ", ".join(unlisted)
        )
    try:
        package.load_constants(taken, check_full_update=False)
        return
    except Exception:  # one refused name refuses the whole map: load the others
        pass
    for name, value in taken.items():
        try:
            package.load_constants({name: value}, check_full_update=False)
        except Exception as error:
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            print(f"  refused by load_constants, so the engine keeps it compiled: {name} ({first})")


def holding(module: Any, weights: Mapping[str, Any] | None, label: str) -> Any:
    """``module`` (the ``label`` program, uncompiled) with the weight set loaded, where
    there is one."""
    if weights:
        unknown = module.load_state_dict(dict(weights), strict=False).unexpected_keys
        if unknown:  # said: this program then runs with its own value of each
            print(f"\nthe {label} program has no weight named {', '.join(sorted(unknown))}")
    return module


def buffer_runner(device: torch.device) -> LibraryRunner:
    """The package's compiled library in torch's own AOTI runner, whose buffers can be read:
    called like the engine, with .buffers() giving {buffer name: tensor} after a call."""
    import atexit

    runner_class = aoti_runner_class(device.type)
    if runner_class is None:
        raise CouldNotRun(f"this torch has no AOTI runner for {device.type} to read buffers back")
    scratch = os.environ.get(SCRATCH)
    folder = Path(tempfile.mkdtemp(prefix="repro-buffers-", dir=scratch))
    if not scratch:  # run with --in-process: nobody else removes it
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
    library = extract_model_library(HERE / "package.pt2", folder)
    if isinstance(library, str):
        raise CouldNotRun(f"the engine's buffers cannot be read back: {library}")
    return LibraryRunner(runner_class, library, device)


def replay(bundle: Bundle, title: str, label: str, program: Callable[..., Any]) -> list[Mismatch]:
    """Run ``program`` as the check did, print how it compares with eager; the mismatches."""
    print(f"\n{title} vs eager:")
    check = bundle.check
    mismatches = run_and_compare(
        label,
        program,
        bundle.exported,
        bundle.inputs["args"],
        bundle.inputs["kwargs"],
        bundle.eager,
        check["rtol"],
        check["atol"],
        names=check.get("outputs"),
        mutated=set(check.get("mutated_inputs", ())),
        buffers=bundle.buffers,
        steps=bundle.steps,
    )
    for _, _, text in mismatches:
        print("  " + text.replace("\n", "\n    "))
    if mismatches:
        print(f"  {plural(len(mismatches), 'mismatch', 'mismatches')}")
    else:
        print("  matches on every call")
    return mismatches


def what_was_reported(target: Mapping[str, Any]) -> str:
    kind, location = target.get("kind"), target.get("location")
    if not target:
        return "the reported finding"
    if location:
        return f"{kind} difference at {location}"
    return f"{kind} difference"


def reproduced(
    target: Mapping[str, Any], engine_mismatches: Sequence[Mismatch], export_differs: bool
) -> bool:
    """Whether the engine shows the reported finding again; says so when it does not."""
    wanted = (target.get("kind"), target.get("location"))
    # no location: any difference of that kind (a deployment probe names the input it varied)
    if any(
        kind == wanted[0] and (not wanted[1] or location == wanted[1])
        for kind, location, _ in engine_mismatches
    ):
        return True
    if engine_mismatches:
        what = what_was_reported(target)
        print(f"NOT REPRODUCED: the AOTI engine differs from eager, but not as reported ({what}).")
    else:
        print("NOT REPRODUCED: the AOTI engine matches eager on every call.")
    if export_differs:
        print("(The exported program differs from eager, though.)")
    return False


def which_stage(export_differs: bool, decompose_differs: bool | None) -> str:
    """Where a reproduced difference comes from, as far as the two programs tell."""
    if export_differs:
        return (
            "The exported program differs from eager too: the difference is already in what "
            "torch.export traced (an export bug, or code the model runs only while exporting), "
            "before any decomposition or compile."
        )
    if decompose_differs:
        return (
            "The exported program matches eager but the decomposed one does not: "
            "run_decompositions() introduced the difference."
        )
    if decompose_differs is None:
        return "The exported program matches eager: decomposition or the AOTI compile broke it."
    return (
        "The exported and the decomposed programs match eager: the AOTI compile "
        "(or the engine's runtime) introduced the difference."
    )


# --------------------------------------------------------------------------- the comparison


def run_and_compare(
    label: str,
    program: Callable[..., Any],
    exported: ExportedProgram,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    eager: Sequence[tuple[Sequence[Any], Mapping[str, Any]]],
    rtol: float | None,
    atol: float | None,
    names: Sequence[str] | None = None,
    mutated: Iterable[str] = (),
    buffers: Sequence[Mapping[str, Any]] | None = None,
    steps: Sequence[Sequence[Any]] | None = None,
) -> list[Mismatch]:
    """Call `program` len(eager) times on one copy of the inputs (with `steps`, a decode
    loop's flat inputs of each call, each call on a copy of its own); return the mismatches.

    Each mismatch is (kind, location, text): kind "output", "mutated input", "untouched
    input" (an input the program does not mutate, changed), "buffer", or "raised". After
    each call the output leaves, and each tensor input as the call left it, are compared
    with eager's; with `buffers` (eager's, one dict per call) the program's registered
    buffers too (a module's own, the runner's read back); `names` names the output leaves,
    `label` the program's values in the figures.
    """
    import torch

    args, kwargs = clone((tuple(args), dict(kwargs)))
    inputs = named_user_inputs(exported, args, kwargs)
    mutated = set(mutated)
    mismatches: list[Mismatch] = []
    for call, (eager_outputs, eager_inputs) in enumerate(eager, start=1):
        where = f"call {call} of {len(eager)}"
        if steps is not None and call > 1:
            args, kwargs = clone((tuple(steps[call - 1]), {}))
            inputs = named_user_inputs(exported, args, kwargs)
        try:
            with torch.no_grad():
                outputs = program(*args, **kwargs)
        except Exception:
            mismatches.append(("raised", "", f"{where}: raised\n{traceback.format_exc().rstrip()}"))
            break
        expected, actual = list(eager_outputs), flat_list(outputs)
        labels = list(names or ())
        if len(labels) != len(expected):
            labels = [f"output[{i}]" for i in range(len(expected))]
        if len(expected) != len(actual):
            text = f"output structure, {where}: eager {len(expected)} leaves, {label} {len(actual)}"
            mismatches.append(("output", "output", text))
        else:
            for location, want, got in zip(labels, expected, actual):
                for text in compare(f"{location}, {where}", label, want, got, rtol, atol):
                    mismatches.append(("output", location, text))
        for name, want in eager_inputs.items():
            location = f"input '{name}'"
            kind = "mutated input" if name in mutated else "untouched input"
            for text in compare(f"{location}, {where}", label, want, inputs[name], rtol, atol):
                mismatches.append((kind, location, text))
        if buffers is not None:
            held = held_buffers(program)
            mismatches += compare_buffers(where, label, buffers[call - 1], held, rtol, atol)
    return mismatches


def held_buffers(program: Callable[..., Any]) -> dict[str, Any]:
    """The registered buffers ``program`` holds now: the runner's read back, a module's own."""
    import torch

    if isinstance(program, LibraryRunner):
        return program.buffers()
    if isinstance(program, torch.nn.Module):
        return dict(program.named_buffers())
    return {}


def compare_buffers(
    where: str,
    label: str,
    expected: Mapping[str, Any],
    held: Mapping[str, Any],
    rtol: float | None,
    atol: float | None,
) -> list[Mismatch]:
    """Eager's buffers after a call against those the program holds."""
    mismatches: list[Mismatch] = []
    for name, want in expected.items():
        location = f"buffer '{name}'"
        if name not in held:
            mismatches.append(
                ("buffer", location, f"{location}, {where}: {label} does not hold it")
            )
            continue
        for text in compare(f"{location}, {where}", label, want, held[name], rtol, atol):
            mismatches.append(("buffer", location, text))
    return mismatches


def flat_list(outputs: Any) -> list[Any]:
    """A flat program returns a tuple of leaves; one output may come back bare."""
    return list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]


def compare(
    location: str, label: str, expected: Any, actual: Any, rtol: float | None, atol: float | None
) -> list[str]:
    """[] if `actual` passes assert_close against eager's `expected`, else [the figures]."""
    import torch

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


def figures(
    label: str, expected: Any, actual: Any, rtol: float, atol: float, error: AssertionError
) -> str:
    """How far `actual` is from `expected`: count beyond tolerance, max abs and rel error."""
    import torch

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
    index = torch.unravel_index(torch.where(beyond, abs_error, -1.0).argmax(), want.shape)
    worst = tuple(int(i) for i in index)
    return (
        f"{int(beyond.sum())} of {want.numel()} elements beyond rtol={rtol:g}, atol={atol:g}"
        f" (shape {tuple(expected.shape)}, {expected.dtype})\n"
        f"max abs error {float(abs_error.max()):.3g}, max rel error {float(rel_error.max()):.3g}; "
        f"worst at index {worst}: eager={number(expected[worst])} {label}={number(actual[worst])}"
    )


def tolerance(expected: Any, rtol: float | None, atol: float | None) -> tuple[float, float]:
    """The saved rtol/atol; where one is None, assert_close's default for the dtype.

    Integers and bools always compare exactly, as in the check.
    """
    import torch

    if isinstance(expected, torch.Tensor):
        inexact = expected.is_floating_point() or expected.is_complex()
        dtype = expected.dtype
    else:  # Python numbers compare as float64 / complex128 / exactly
        inexact = isinstance(expected, (float, complex))
        dtype = torch.complex128 if isinstance(expected, complex) else torch.float64
    if not inexact:
        return 0.0, 0.0
    default_rtol, default_atol = default_tolerance(dtype)
    return (default_rtol if rtol is None else rtol, default_atol if atol is None else atol)


def named_user_inputs(
    exported: ExportedProgram, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """{user input name: the caller's leaf}, the names of exported.graph_signature.

    torch.export orders keyword inputs as its in_spec says, not as the caller wrote them.
    """
    import torch.utils._pytree as pytree
    from torch.export.graph_signature import InputKind

    in_spec = exported.call_spec.in_spec
    if in_spec is not None and in_spec.num_children == 2:
        kwargs_spec = in_spec.child(1) if hasattr(in_spec, "child") else in_spec.children_specs[1]
        if kwargs_spec.context is not None:
            kwargs = {name: kwargs[name] for name in kwargs_spec.context if name in kwargs}
    leaves = pytree.tree_leaves((tuple(args), dict(kwargs)))
    names = [
        spec.arg.name
        for spec in exported.graph_signature.input_specs
        if spec.kind == InputKind.USER_INPUT
    ]
    if len(names) != len(leaves):
        raise ValueError(f"the program takes inputs {names}, but {len(leaves)} were saved")
    return dict(zip(names, leaves))


def clone(tree: Any) -> Any:
    """Every tensor of ``tree`` copied with its sizes, strides and storage offset (the
    engine was compiled for them), in storage of its own."""
    import torch
    import torch.utils._pytree as pytree

    def copied(x: torch.Tensor) -> torch.Tensor:
        x = x.detach()
        if x.layout != torch.strided or x.is_conj() or x.is_neg():
            return x.clone()
        offset = x.storage_offset()
        extent = 0 if x.numel() == 0 else 1 + sum((n - 1) * s for n, s in zip(x.shape, x.stride()))
        storage = torch.empty((offset + extent,), dtype=x.dtype, device=x.device)
        out = torch.empty((0,), dtype=x.dtype, device=x.device)
        out.set_(storage.untyped_storage(), offset, x.size(), x.stride())
        if extent:
            out.as_strided((extent,), (1,), offset).copy_(x.as_strided((extent,), (1,), offset))
        return out

    return pytree.tree_map(lambda x: copied(x) if isinstance(x, torch.Tensor) else x, tree)


def number(element: torch.Tensor) -> str:
    value = element.item()
    return f"{value:.9g}" if isinstance(value, float) else repr(value)


def describe_tolerance(rtol: float | None, atol: float | None) -> str:
    if rtol is None and atol is None:
        return "tolerance: torch.testing.assert_close's defaults for each dtype"
    rtol_text = "default for the dtype" if rtol is None else f"{rtol:g}"
    atol_text = "default for the dtype" if atol is None else f"{atol:g}"
    return f"tolerance: rtol={rtol_text}, atol={atol_text}"


def plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def device_available(device: torch.device) -> bool:
    import torch

    if device.type == "cpu":
        return True
    backend = getattr(torch, device.type, None)
    return backend is not None and bool(backend.is_available())


if __name__ == "__main__":
    sys.exit(main() if "--in-process" in sys.argv[1:] else supervise())
