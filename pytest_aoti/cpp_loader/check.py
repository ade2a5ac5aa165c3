"""The C++ loader check: after parity on the example, the program's package is loaded by
``torch::inductor::AOTIModelPackageLoader`` in the runner process (no Python in it), and the
example and the samples run through it. On CPU its outputs, and its inputs after the call,
must equal the Python engine's bit for bit where the runner has this process's threads,
denormal flushing and float32 matmul precision (within the check's tolerance where it
could not take them, and on CUDA), and match eager's within the check's tolerance.

Only the first call from the exported state is compared: a program that mutates registered
buffers is loaded fresh for each input set, on both sides, and its buffers are not read.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._pytree import keystr, tree_flatten_with_path

from pytest_aoti.api import (
    CheckContext,
    CheckPlan,
    Comparison,
    Outcome,
    Phase,
    ProgramCall,
    RecordPart,
    session_of,
)
from pytest_aoti.cpp_loader.agreement import Agreement, loader_failed, max_abs, perturbed
from pytest_aoti.cpp_loader.build import runner_build
from pytest_aoti.cpp_loader.feature import CppLoaderOptions
from pytest_aoti.cpp_loader.protocol import lib_request, run_request, set_request
from pytest_aoti.cpp_loader.runner import LoaderProcess, RunnerGone, loader_process

if TYPE_CHECKING:
    import pytest

    from pytest_aoti.api import AotiProgram, InputSet

PERTURB_ENV = "PYTEST_AOTI_CPP_LOADER_PERTURB"
"""A test hook, for the plugin's own tests: set to 1, the input file the runner reads gets
one more than the example in the first element of its first floating-point input, so that a
correct runner disagrees with the Python engine."""
RUNNERS = 2
"""``num_runners`` of the loader for a program without buffer state (a server's runners)."""
CALL_SECONDS = 300.0
"""Seconds the runner may take to load a package and run it once."""
_PAID: set[Path] = set()
"""Runners built by this process whose build a check's record already counts."""


class CppLoaderCheck:
    """The package through the C++ loader, against the Python engine and eager."""

    name = "cpp_loader"
    phase: Phase = "engine"

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        # a random program's outputs cannot match from one engine to the other
        return bool(plan.options.of(CppLoaderOptions).cpp_loader) and not context.random_ops

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        __tracebackhide__ = True
        why = program_reason(context)
        if not why and context.another_load_over_budget():  # the summary's line says so
            context.budget.left_out("cpp_loader", len(plan.input_sets))
            return Outcome(record=skipped(SERVED, machine=False, budget=True))
        if why:
            note = f"{context.label or 'a check'}: the C++ loader check skipped: {why}"
            return Outcome(record=skipped(why, machine=False, notes=(note,)))
        root, writable = cache_place(context)
        waiting = time.perf_counter()  # for the build the session started, where it still runs
        build = runner_build(root, writable=writable)
        waited = time.perf_counter() - waiting
        if build.binary is None:
            return Outcome(record=skipped(build.reason, machine=True))
        run = LoaderRun(plan, context, loader_process(build.binary))
        try:
            run.run()
        except LibraryRefused as refused:
            note = f"{context.label or 'a check'}: the C++ loader check skipped: {refused}"
            return Outcome(record=skipped(str(refused), machine=False, notes=(note,)))
        # the build's seconds are the cost of the first check that ran on it in this process
        built = build.seconds if build.built_here and build.binary not in _PAID else None
        _PAID.add(build.binary)
        return Outcome(record=run.record(built, waited))


SERVED = (
    "a large program (32 MiB or more of weights and example): the runner would load it "
    "again, beyond the check budget (budget='off' runs it)"
)


def skipped(
    why: str, *, machine: bool, notes: tuple[str, ...] = (), budget: bool = False
) -> RecordPart:
    """The record of a check that did not run: why, whether the machine is the reason, and
    whether the check budget is (the summary's line on the budget counts those)."""
    part = {"ran": False, "skipped": why, "machine": machine}
    if budget:
        part["budget"] = True
    return RecordPart({"cpp_loader": part}, notes)


def program_reason(context: CheckContext) -> str:
    """Why this program cannot run through the C++ loader here ("" when it can)."""
    program = context.program
    if context.device.type not in ("cpu", "cuda"):
        return f"the runner loads CPU and CUDA packages, not {context.device.type}"
    if context.random_ops:
        return "the program draws random numbers: another process draws others"
    preparation = program.child_preparation()
    python_ops = [name for name, _ in preparation.imports] + list(preparation.unfound)
    if python_ops:
        return (
            "the program calls custom ops registered in Python "
            f"({', '.join(sorted(python_ops))}), which a process without Python lacks"
        )
    return ""


def cache_place(context: CheckContext) -> tuple[Path | None, bool]:
    """Where the runner is kept (the cache root; None: none) and whether it may be written."""
    if context.item is None:
        return None, False
    return session_cache_place(context.item.config)


def session_cache_place(config: pytest.Config) -> tuple[Path | None, bool]:
    """Where the session keeps the runner (None: nowhere) and whether it may be written."""
    session = session_of(config)
    mode = session.settings.cache_mode
    if mode == "off":
        return None, False
    return session.stores.cache_root(), mode == "readwrite"


def process_settings() -> tuple[int, bool, str]:
    """This process's threads, denormal flushing (seen on a float32 subnormal) and float32
    matmul precision: what the runner is set to."""
    flushing = float((torch.full((1,), 1e-39) * 1.0).item()) == 0.0
    return torch.get_num_threads(), flushing, torch.get_float32_matmul_precision()


class LibraryRefused(Exception):
    """An op library this process loaded does not load in the runner: the check is skipped."""


class LoaderRun:
    """The input sets of one check through the runner, each compared as it comes."""

    def __init__(self, plan: CheckPlan, context: CheckContext, process: LoaderProcess) -> None:
        self.plan = plan
        self.context = context
        self.program: AotiProgram = context.program
        self.process = process
        self.stateful = bool(self.program.mutated_buffers)
        self.served = context.served_by_child()
        """The Python engine's calls come from the engine child (a large package): no second
        engine in this process; the child's settings are its own, so the rule is the
        tolerance."""
        self.runners = 1 if self.stateful else RUNNERS
        self.threads, self.flushing, self.precision = process_settings()
        self.exact = False
        self.ran = 0
        self.loads = 0
        self.load_seconds = 0.0
        self.call_seconds = 0.0
        self.start_seconds: float | None = None
        self.vs_engine = 0.0
        self.vs_eager = 0.0
        self.seconds = 0.0

    def run(self) -> None:
        __tracebackhide__ = True
        started = time.perf_counter()
        budget = self.context.budget
        sets = self.plan.input_sets
        budget.plan("cpp_loader", len(sets), given=True)  # the test's own input sets: all
        try:
            self._prepare()
            with tempfile.TemporaryDirectory(prefix="pytest-aoti-cpp-") as folder:
                for index, input_set in enumerate(sets):
                    self._check(index, input_set, Path(folder))
                    self.ran += 1
        finally:
            self.seconds = time.perf_counter() - started
            budget.ran("cpp_loader", self.ran)

    def _prepare(self) -> None:
        """Start the runner if need be, load the op libraries the package may call, and set
        it as this process is set; exact where it took every setting (on CPU)."""
        __tracebackhide__ = True
        try:
            # the op libraries this process loaded (torch.ops.load_library): the package may
            # call their ops, which a C++ library registers wherever it is loaded
            for library in sorted(getattr(torch.ops, "loaded_libraries", ())):
                answer = self.process.load_library(lib_request(library), library, CALL_SECONDS)
                if answer is not None and not answer.ok:  # e.g. one that needs Python
                    raise LibraryRefused(
                        f"the op library {Path(library).name} does not load without Python "
                        f"({answer.message})"
                    )
            request = set_request(self.threads, self.flushing, self.precision)
            taken = self.process.configure(request, CALL_SECONDS)
        except RunnerGone as gone:
            raise loader_failed("start", str(gone), "") from None
        finally:
            self.start_seconds = self.process.take_start_seconds()
        if not taken.ok:
            raise loader_failed(taken.stage, taken.message, "")
        self.exact = (
            self.program.device.type == "cpu"
            and not self.served
            and int(taken.number("threads")) == self.threads
            and (taken.fields.get("denormal") == "1") == self.flushing
        )

    def _check(self, index: int, input_set: InputSet, folder: Path) -> None:
        """One input set: the runner's outputs and inputs after the call, then the Python
        engine's and eager's on clones of the same inputs, compared leaf by leaf."""
        __tracebackhide__ = True
        args, kwargs = input_set
        what = "the example" if index == 0 else f"sample {index}"
        loaded, count = self._through_runner(index, args, kwargs, folder, what)
        cpp_outputs, cpp_inputs = loaded[:count], loaded[count:]
        # a fresh engine for buffer state (each load maps the package once more); else the
        # check's engine, whose calls a large package's engine child answers
        engine = self.program.load_engine() if self.stateful else self.context.engine()
        ((engine_out, engine_inputs),) = self.context.call_history(engine, args, kwargs, 1)
        eager = self.context.call_history(self.plan.module, args, kwargs, 1, eager=True)
        exact = self.exact and self._repeats(engine, args, kwargs, engine_out)
        check = Agreement(what, exact, self._mode(exact), self.plan.tolerance)
        outputs = [
            (f"output{keystr(path)}", leaf) for path, leaf in tree_flatten_with_path(engine_out)[0]
        ]
        check.count("outputs", len(outputs), len(cpp_outputs))
        named = [
            (f"input '{name}'", value)
            for name, value in engine_inputs.items()
            if isinstance(value, torch.Tensor)
        ]
        check.count("inputs", len(named), len(cpp_inputs))
        for (location, want), got in zip(outputs + named, cpp_outputs + cpp_inputs):
            check.with_engine(location, want, got)
            self.vs_engine = _larger(self.vs_engine, max_abs(want, got))
        eager_leaves = [leaf for _, leaf in tree_flatten_with_path(eager[0][0])[0]]
        if len(eager_leaves) == len(cpp_outputs):  # else parity judged the structure
            for (location, engine_leaf), want, got in zip(outputs, eager_leaves, cpp_outputs):
                check.with_eager(location, want, engine_leaf, got)
                self.vs_eager = _larger(self.vs_eager, max_abs(want, got))

    def _through_runner(
        self, index: int, args: tuple[Any, ...], kwargs: dict[str, Any], folder: Path, what: str
    ) -> tuple[list[Any], int]:
        """The runner's results on one input set: outputs, then inputs after the call; and
        how many are outputs."""
        __tracebackhide__ = True
        tensors = [
            leaf.detach()
            for leaf in ProgramCall(self.program.exported).flat(args, kwargs)
            if isinstance(leaf, torch.Tensor)
        ]
        if self.program.device.type != "cpu":
            tensors = [tensor.cpu() for tensor in tensors]  # moved back by the runner
        if os.environ.get(PERTURB_ENV) == "1":
            tensors = perturbed(tensors)
        inputs, outputs = folder / f"inputs-{index}.pt", folder / f"outputs-{index}.pt"
        torch.save(tensors, inputs)
        request = run_request(
            self.program.package_path,
            inputs,
            outputs,
            runners=self.runners,
            fresh=self.stateful,
            device=str(self.program.device),
        )
        try:
            answer = self.process.ask(request, CALL_SECONDS)
        except RunnerGone as gone:
            raise loader_failed("call", str(gone), what) from None
        if not answer.ok:
            raise loader_failed(answer.stage, answer.message, what)
        self.loads += int(answer.fields.get("loaded") == "1")
        self.load_seconds += answer.number("load")
        self.call_seconds += answer.number("call")
        try:
            loaded = torch.load(outputs, weights_only=True, map_location="cpu")
            return list(loaded), int(answer.number("outputs"))
        except Exception as error:  # a file cut short, a type the safe reader refuses
            raise loader_failed("outputs", f"{type(error).__name__}: {error}", what) from None

    def _repeats(
        self, engine: Any, args: tuple[Any, ...], kwargs: dict[str, Any], first: Any
    ) -> bool:
        """Whether the Python engine answers the same input set bit for bit twice: an engine
        whose kernels accumulate in parallel (a scatter-add over threads) may not, and then
        the runner is held to the tolerance, not to the bit."""
        if self.stateful:
            return True  # a fresh engine per input set: its first call is the one compared
        ((again, _),) = self.context.call_history(engine, args, kwargs, 1)
        return Comparison.same(first, again)

    def _mode(self, exact: bool) -> str:
        """How the results must agree with the Python engine's, in words for the failure."""
        if exact:
            return (
                f"bit for bit (the runner has this process's {self.threads} thread(s), "
                f"denormals {'flushed' if self.flushing else 'kept'} and float32 matmul "
                f"precision {self.precision})"
            )
        if self.served:
            return "within the check's tolerance (the Python engine ran in the engine child)"
        if self.exact:
            return "within the check's tolerance (the Python engine itself differs call to call)"
        return "within the check's tolerance"

    def record(self, build_seconds: float | None, build_wait_seconds: float) -> RecordPart:
        part = {
            "ran": True,
            "seconds": round(self.seconds, 4),
            "build_seconds": None if build_seconds is None else round(build_seconds, 3),
            "build_wait_seconds": round(build_wait_seconds, 3),
            "start_seconds": None if self.start_seconds is None else round(self.start_seconds, 4),
            "load_seconds": round(self.load_seconds, 6),
            "call_seconds": round(self.call_seconds, 6),
            "loads": self.loads,
            "exact": self.exact,
            "threads": self.threads,
            "runners": self.runners,
            "input_sets": self.ran,
            "max_abs_vs_engine": self.vs_engine,
            "max_abs_vs_eager": self.vs_eager,
        }
        return RecordPart({"cpp_loader": part})


def _larger(current: float, new: float) -> float:
    if math.isnan(new) or math.isnan(current):
        return math.nan
    return max(current, new)
