"""The crash screen: an engine can end the process that calls it (heap overrun, crashing custom op,
CUDA illegal access), so a check's calls run first in the engine child; a death, a sticky CUDA
error or a hang past :data:`SCREEN_TIMEOUT` fails the test with a ``crash`` finding, not the run.
Where the child cannot register the custom ops the calls run unprotected (the record says so).
For a program without buffer state whose package holds at least
:data:`~pytest_aoti.checks.base.SERVED_FROM_BYTES`, the child is the engine's one home: every
run makes the check's calls there and the check takes its outputs (:mod:`.served_calls`), so
the weights are loaded once. Otherwise (buffer state, or a small package, where a second load
costs less than the child's start) the calls run in the child first and again in the test
process, and verdicts are kept with the package, so a warm run screens nothing again."""

from __future__ import annotations

import hashlib
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from pytest_aoti.checks.base import (
    CheckContext,
    CheckPlan,
    InputSet,
    Outcome,
    Phase,
    RecordPart,
    Triage,
)
from pytest_aoti.compiling.custom_ops import ChildPreparation
from pytest_aoti.errors import AotiCheckError
from pytest_aoti.findings import Finding, FindingKind
from pytest_aoti.isolation.process import HUNG, PendingJobs
from pytest_aoti.mutation_maps import flat_user_inputs
from pytest_aoti.trees import clone_tree, tensor_bytes

if TYPE_CHECKING:
    import torch

    from pytest_aoti.checks.served_calls import ServedCalls
    from pytest_aoti.compiling.program import AotiProgram

SCREEN_TIMEOUT = 120.0
"""Seconds the screen of one input set may take in the child before it counts as a hang."""

SCREEN_FORMAT = 1
"""Version of the kept verdicts: part of their key."""

SIDECAR = "crash_screen"
"""Where the verdicts are kept with the package."""

MAX_SCREEN_BYTES = 2**30
"""Input bytes above which an input set is not copied to the child (it runs unprotected)."""

MAX_KEPT_BYTES = 2**28
"""Input bytes of one request above which the child's outputs are not kept: the check calls
the engine here instead."""

TIMED_CALLS = 3
"""Calls of the example the child times (fewer once :data:`TIMED_SECONDS` are spent)."""

TIMED_SECONDS = 0.5
"""Seconds the child spends at most timing the example's calls."""

_DIGEST_BYTES = 2**20
"""How much of each tensor's data goes into the verdict's key (its start)."""

HANG = "hang"
"""The finding's location for a call that did not return."""


class CrashScreenCheck:
    """Every input set in the engine child first: a crash fails the test, not the run."""

    name = "crash_screen"
    phase: Phase = "engine"

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        return plan.options.crash_screen

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        __tracebackhide__ = True
        screen = CrashScreen.for_check(plan, context)
        screen.timed = screen.served is not None  # timed where the check's calls run
        for index, input_set in enumerate(plan.input_sets):
            screen.screen(input_set, "the example inputs" if index == 0 else f"sample {index}")
            screen.timed = False
        return Outcome(record=screen.record())


@dataclass
class CrashScreen:
    """Screens input sets of one program in the engine child (see the module's docstring)."""

    program: AotiProgram
    module: torch.nn.Module
    calls: int
    attachments: CheckContext.ProgramAttachments | None = None
    triage: Triage | None = None
    screened: int = 0
    """Input sets run in the child by this screen."""
    cached: int = 0
    """Input sets whose verdict was kept from an earlier screen."""
    unprotected: list[str] = field(default_factory=list)
    """Why input sets ran unprotected (one reason each)."""
    served: ServedCalls | None = None
    """Where the child's calls are kept for the check to take (None: the check makes them)."""
    timed: bool = False
    """Also time the first input set's calls in the child (:data:`TIMED_CALLS`)."""
    _preparation: ChildPreparation | None = None
    _verdicts: dict[str, Any] | None = None
    _search_calls: dict[int, tuple[InputSet, InputSetCalls]] = field(default_factory=dict)
    """The child's calls on each input set of the last request :meth:`screen_all` served
    (see ``serve``), by the input set's identity."""
    _earlier_calls: dict[int, tuple[InputSet, InputSetCalls]] = field(default_factory=dict)
    """The request's before it: a search checks one batch while the child runs the next."""

    @classmethod
    def for_check(cls, plan: CheckPlan, context: CheckContext) -> CrashScreen:
        """The screen of one check's engine calls; without buffer state, the check takes the
        child's outputs (:mod:`.served_calls`)."""
        program = context.program
        served = context.served_calls() if context.served_by_child() else None
        return cls(
            program, plan.module, context.calls, context.attachments, context.triage, served=served
        )

    @classmethod
    def where_on(cls, plan: CheckPlan, context: CheckContext) -> CrashScreen | None:
        """The screen of one check's engine calls; None where ``crash_screen`` is off."""
        return cls.for_check(plan, context) if plan.options.crash_screen else None

    def screen(self, input_set: InputSet, label: str) -> None:
        """Run ``input_set`` (named ``label``) in the child; raise the crash finding if it died."""
        __tracebackhide__ = True
        self.screen_all([input_set], [label])

    def screen_all(
        self, input_sets: Sequence[InputSet], labels: Sequence[str], *, serve: bool = False
    ) -> None:
        """Screen several input sets in one request; raise the first crash's finding.
        ``serve``: the input sets of a search, each run once: the child's calls are kept for
        :meth:`search_engine` (a program without buffer state), so the check takes them
        rather than calling the engine again here, and no verdict is kept for them."""
        __tracebackhide__ = True
        self.start_all(input_sets, labels, serve=serve).finish()

    def start_all(
        self, input_sets: Sequence[InputSet], labels: Sequence[str], *, serve: bool = False
    ) -> ScreenRequest:
        """:meth:`screen_all` begun: the child works on the input sets while this process
        goes on (eager's calls of the same sets, say); :meth:`ScreenRequest.finish` waits
        and raises the first crash's finding. The child takes no other request before it."""
        search = serve and self.served is None and not self.program.mutated_buffers
        if search:
            # the calls of the request before the last go
            self._earlier_calls, self._search_calls = self._search_calls, {}
        serving = self.served is not None or search
        pending: list[tuple[int, str]] = []
        verdicts: dict[int, dict[str, Any]] = {}
        for position, input_set in enumerate(input_sets):
            # the child serves the check's calls: it makes them, kept verdict or not
            key = "" if serving else self._key(input_set)
            verdict = self._kept().get(key) if not serving else None
            if verdict is not None:
                self.cached += 1
                verdicts[position] = verdict
                continue
            if why_not := self._why_unprotected(input_set):
                if why_not not in self.unprotected:
                    self.unprotected.append(why_not)
                continue
            pending.append((position, key))
        chunks = _chunks(pending, [input_sets[position] for position, _ in pending])
        first = (
            self._start_many([input_sets[position] for position, _ in chunks[0]], serving, search)
            if chunks
            else None
        )
        return ScreenRequest(self, input_sets, labels, verdicts, chunks, first, serving, search)

    def record(self) -> RecordPart:
        """``crash_screen``: ``screened``, ``cached`` or ``unprotected`` (with a note why)."""
        if self.unprotected:
            notes = tuple(f"engine calls ran unprotected: {why}" for why in self.unprotected)
            return RecordPart({"crash_screen": "unprotected"}, notes=notes)
        return RecordPart({"crash_screen": "screened" if self.screened else "cached"})

    def _why_unprotected(self, input_set: InputSet) -> str:
        if self.program.device.type not in ("cpu", "cuda"):
            return f"the engine child does not run {self.program.device.type} engines"
        preparation = self._prepared()
        if preparation.unfound:
            return (
                f"the module that registered the custom op {preparation.unfound[0]!r} was not "
                "found, so a child process cannot call it"
            )
        size = tensor_bytes(input_set)
        if size > MAX_SCREEN_BYTES:
            return f"the inputs ({size / 2**20:.0f} MiB) are too large to copy to a child process"
        return ""

    def _prepared(self) -> ChildPreparation:
        if self._preparation is None:
            self._preparation = self.program.child_preparation()
        return self._preparation

    def search_engine(self, load: Callable[[], Any], input_set: InputSet) -> Callable[[], Any]:
        """The engine of a search's ``input_set`` (``load``: the check's own): the one
        answering the calls the child made on it, where :meth:`screen_all` served them; else
        ``load``'s. A call the child did not make goes to ``load``'s engine."""

        def engine() -> Any:
            kept = self._search_calls.get(id(input_set)) or self._earlier_calls.get(id(input_set))
            if kept is None or kept[0] is not input_set:
                return load()
            from pytest_aoti.checks.served_calls import ServedEngine  # imports torch

            # it answers as ServedCalls do (answer, served, made_here), by input set
            return ServedEngine(self.program, cast("ServedCalls", kept[1]), load)

        return engine

    def _start_many(self, input_sets: Sequence[InputSet], serving: bool, search: bool) -> _Started:
        import torch

        inputs = []
        for args, kwargs in input_sets:
            flat = flat_user_inputs(self.program.exported, tuple(args), kwargs)
            inputs.append([leaf for leaf in clone_tree(flat) if isinstance(leaf, torch.Tensor)])
        device = self.program.device
        preparation = self._prepared()
        keep = serving and sum(map(tensor_bytes, inputs)) <= MAX_KEPT_BYTES
        request = {
            "package": str(self.program.package_path),
            "device_index": device.index if device.type == "cuda" else None,
            # one engine for every set, unless each must start from the exported state
            "fresh": bool(self.program.mutated_buffers),
            "inputs": inputs,
            "repeat": self.calls,
            "discard": True,
            "keep_calls": keep,
            # a search's outputs are held until its checks take them: as many as inputs
            **({"keep_bytes": MAX_KEPT_BYTES} if keep and search else {}),
            **({"time_calls": TIMED_CALLS, "time_budget": TIMED_SECONDS} if self.timed else {}),
            **preparation.request(),
        }
        jobs = [(index, False) for index in range(len(inputs))]
        # each set gets the deadline it would get screened alone
        pending = PendingJobs(request, jobs, SCREEN_TIMEOUT * len(jobs), preparation.path)
        return _Started(list(input_sets), inputs, jobs, pending)

    def _finish_many(self, started: _Started, search: bool) -> list[dict[str, Any]]:
        results = started.pending.results()
        verdicts = [_verdict(results[job]) for job in started.jobs]
        device = self.program.device
        for input_set, sent, job, verdict in zip(
            started.input_sets, started.inputs, started.jobs, verdicts
        ):
            calls = results[job].get("calls") or ()
            if verdict.get("verdict") != "ok":
                continue
            if self.served is not None:
                self.served.keep(sent, calls)
                self.served.keep_seconds(sent, results[job].get("seconds") or ())
            elif search and calls:
                answers = InputSetCalls(device, sent, calls)
                self._search_calls[id(input_set)] = (input_set, answers)
        return verdicts

    def _failure(self, verdict: dict[str, Any], input_set: InputSet, label: str) -> AotiCheckError:
        error = AotiCheckError(crash_finding(verdict, label, self.calls))
        if self.triage is not None and error.finding.location != HANG:
            return self.triage.replayed(error, self.module, input_set, self.calls)
        return error

    def _key(self, input_set: InputSet) -> str:
        return f"{SCREEN_FORMAT}:{self.calls}:{inputs_digest(input_set)}"

    def _kept(self) -> dict[str, Any]:
        if self._verdicts is None:
            kept = (
                self.attachments.attached(self.program.key, SIDECAR) if self.attachments else None
            )
            self._verdicts = dict(kept or {})
        return self._verdicts

    def _keep(self, verdicts: Sequence[tuple[str, dict[str, Any]]]) -> None:
        """Keep ``(key, verdict)`` pairs with the package: one write of the sidecar."""
        if not verdicts:
            return
        kept = self._kept()
        kept.update(verdicts)
        if self.attachments is None:
            return
        try:
            self.attachments.attach(self.program.key, SIDECAR, dict(kept))
        except OSError:  # a verdict not kept is screened again next time: never a failure
            pass


@dataclass
class _Started:
    """One request the child works on: its input sets, the tensors sent, its jobs."""

    input_sets: list[InputSet]
    inputs: list[list[Any]]
    jobs: list[tuple[int, bool]]
    pending: PendingJobs


@dataclass(eq=False)
class ScreenRequest:
    """A :meth:`CrashScreen.start_all` under way: :meth:`finish` it (or :meth:`discard` it)
    before the child is asked anything else."""

    _screen: CrashScreen
    _input_sets: Sequence[InputSet]
    _labels: Sequence[str]
    _verdicts: dict[int, dict[str, Any]]
    _chunks: list[list[tuple[int, str]]]
    _first: _Started | None
    _serving: bool
    _search: bool

    def finish(self, ignore: Sequence[int] = ()) -> None:
        """Wait for the child; raise the first crash's finding, except at the positions in
        ``ignore`` (input sets the check no longer runs: eager refused them)."""
        __tracebackhide__ = True
        screen, verdicts = self._screen, self._verdicts
        kept: list[tuple[str, dict[str, Any]]] = []
        for number, chunk in enumerate(self._chunks):
            sets = [self._input_sets[position] for position, _ in chunk]
            started = self._first if number == 0 else None
            if started is None:
                started = screen._start_many(sets, self._serving, self._search)
            self._first = None
            ran = screen._finish_many(started, self._search)
            for (position, key), verdict in zip(chunk, ran):
                screen.screened += 1
                if verdict.get("unprotected"):
                    screen.unprotected.append(str(verdict["unprotected"]))
                    continue
                verdicts[position] = verdict
                # a served check never reads kept verdicts: the child makes its calls anyway
                if verdict["verdict"] != "hang" and not self._serving:
                    kept.append((key, verdict))
        self._chunks = []
        screen._keep(kept)  # one write of the sidecar for the whole request
        for position in sorted(verdicts):
            if position in ignore or verdicts[position]["verdict"] == "ok":
                continue
            raise screen._failure(
                verdicts[position], self._input_sets[position], self._labels[position]
            )

    def discard(self) -> None:
        """Wait for the child's answer to the request under way and drop it."""
        if self._first is not None:
            self._first.pending.discarded()
        self._first, self._chunks = None, []


def _verdict(result: dict[str, Any]) -> dict[str, Any]:
    """One job's result from the child as a verdict: ok, crash (with its signal) or hang."""
    if "unprepared" in result:
        return {
            "unprotected": f"the child could not register the custom ops: {result['unprepared']}"
        }
    crashed = result.get("crashed")
    if crashed is None:
        return {"verdict": "ok"}
    if str(crashed).startswith(HUNG):
        return {"verdict": "hang", "why": crashed}
    return {"verdict": "crash", "signal": result.get("signal"), "why": crashed}


class InputSetCalls:
    """The child's calls on one input set of a search, for its engine (a
    :class:`~pytest_aoti.checks.served_calls.ServedEngine`, which asks them as it asks a
    ``ServedCalls``): answered in order, call k on what call k-1 left in the inputs, each
    only where the inputs it is given are, bit for bit and in layout, what the child's call
    received (else the check's engine makes it). No digest of the inputs: they are compared."""

    def __init__(
        self, device: torch.device, sent: Sequence[torch.Tensor], calls: Sequence[dict[str, Any]]
    ) -> None:
        self.served = 0
        """Calls answered (ServedEngine counts them)."""
        self.made_here = 0
        """Calls the check's engine made instead (ServedEngine counts them)."""
        from pytest_aoti.checks.served_calls import child_calls  # imports torch

        kept = list(child_calls(sent, calls, device))
        self._received = [received for received, _ in kept]
        self._answers = [answer for _, answer in kept]

    def answer(self, inputs: Sequence[torch.Tensor]) -> dict[str, Any] | None:
        position = self.served + self.made_here
        if position >= len(self._answers) or not _same_bits(inputs, self._received[position]):
            return None
        return self._answers[position]


def _same_bits(mine: Sequence[torch.Tensor], theirs: Sequence[torch.Tensor]) -> bool:
    """Whether two lists of tensors match in layout and every bit of every element."""
    import torch

    from pytest_aoti.compare import dense_bytes  # imports torch

    return len(mine) == len(theirs) and all(
        (a.shape, a.stride(), a.dtype, a.device) == (b.shape, b.stride(), b.dtype, b.device)
        and torch.equal(dense_bytes(a), dense_bytes(b))
        for a, b in zip(mine, theirs)
    )


def _chunks(
    pending: list[tuple[int, str]], input_sets: Sequence[InputSet]
) -> list[list[tuple[int, str]]]:
    """``pending`` in requests of at most :data:`MAX_SCREEN_BYTES` of inputs each."""
    chunks: list[list[tuple[int, str]]] = []
    size = 0
    for item, input_set in zip(pending, input_sets):
        nbytes = tensor_bytes(input_set)
        if not chunks or size + nbytes > MAX_SCREEN_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(item)
        size += nbytes
    return chunks


def signal_name(number: int | None) -> str:
    """``SIGABRT`` for 6; ``signal N`` for a number without a name."""
    if number is None:
        return "no signal"
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def crash_finding(verdict: dict[str, Any], label: str, calls: int) -> Finding:
    """The finding of an engine that crashed or hung its child process on ``label``."""
    where = f"on {label}" if label.startswith("the ") else f"on the inputs of {label}"
    calls_text = f"{calls} calls" if calls > 1 else "one call"
    common = (
        f"the calls ran first in a child process ({calls_text} on one engine); the test "
        "process skipped them, so the run goes on",
        "crash_screen=False makes the calls in the test process, unprotected",
    )
    if verdict["verdict"] == "hang":
        message = (
            f"the AOTI compile broke it: the AOTI engine did not return within "
            f"{SCREEN_TIMEOUT:.0f} s {where} (a hang: the child process was ended)"
        )
        return Finding.plain(FindingKind.CRASH, "\n".join((message, *common)), HANG)
    number = verdict.get("signal")
    if number is None:  # the child exited after a CUDA error that sticks to its process
        cause, location = "hit a CUDA error that poisons its process", "CUDA error"
    else:
        cause, location = f"crashed its process ({signal_name(number)})", signal_name(number)
    message = f"the AOTI compile broke it: the AOTI engine {cause} {where}"
    why = str(verdict.get("why") or "")
    lines = (message, *common, *([f"the child: {why}"] if why else []))
    return Finding.plain(FindingKind.CRASH, "\n".join(lines), location, extra={"signal": number})


def inputs_digest(input_set: InputSet) -> str:
    """A key of an input set: tensors' shape, dtype, strides, device and first bytes; reprs."""
    import torch
    import torch.utils._pytree as pytree

    leaves, spec = pytree.tree_flatten(input_set)
    digest = hashlib.sha256(str(spec).encode())
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            meta = (tuple(leaf.shape), str(leaf.dtype), leaf.stride(), str(leaf.device))
            digest.update(repr(meta).encode())
            digest.update(_data_start(leaf))
        else:
            digest.update(repr(leaf).encode())
    return digest.hexdigest()[:32]


def _data_start(tensor: torch.Tensor) -> bytes:
    import torch

    from pytest_aoti.checks.served_calls import element_bytes  # imports torch

    if tensor.is_quantized or tensor.layout != torch.strided or tensor.numel() == 0:
        return b""
    flat = tensor.detach().reshape(-1)
    return element_bytes(flat[: max(1, _DIGEST_BYTES // flat.element_size())])
