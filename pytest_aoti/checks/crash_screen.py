"""The crash screen: a check's engine calls run once in a child process first.

An engine can end the process that calls it: a kernel that overruns its buffer corrupts
the heap and aborts, a custom op crashes, a CUDA illegal access poisons the process. In
the test process that ends the whole pytest run, with no summary and no report. So before
any check calls the engine here, the same calls on the same inputs (each input set, as
many calls as the check makes, on one engine) run in the test process's engine child
(:mod:`pytest_aoti.isolation.process`, a spawned interpreter: CUDA works there). A child
that dies by a signal, exits after a sticky CUDA error, or does not return within
:data:`SCREEN_TIMEOUT` (a hang) fails the test with a ``crash`` finding, and the calls in
the test process are skipped; an ordinary error in the child is left to the checks, which
meet it again in the test process. The generated shapes' input sets are screened the same
way, one by one, before each runs.

The child imports the modules that registered the program's custom ops
(:mod:`pytest_aoti.compiling.custom_ops`). Where it cannot (an op whose module is not
found, an import that fails there, a device the child does not serve), the calls run
unprotected and the record says so. A screened input set's verdict is kept with the
package (the registry's sidecar data), so a warm run screens nothing again.
"""

from __future__ import annotations

import hashlib
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_aoti.checks.base import CheckContext, CheckPlan, InputSet, Outcome, Phase, RecordPart
from pytest_aoti.errors import AotiCheckError
from pytest_aoti.findings import Finding, FindingKind

if TYPE_CHECKING:
    import torch

    from pytest_aoti.checks.base import Sidecars, Triage
    from pytest_aoti.compiling.custom_ops import ChildPreparation
    from pytest_aoti.compiling.program import AotiProgram

SCREEN_TIMEOUT = 120.0
"""Seconds the screen of one input set may take in the child before it counts as a hang."""

SCREEN_FORMAT = 1
"""Version of the kept verdicts: part of their key."""

SIDECAR = "crash_screen"
"""Where the verdicts are kept with the package."""

MAX_SCREEN_BYTES = 2**30
"""Input bytes above which an input set is not copied to the child (it runs unprotected)."""

_DIGEST_BYTES = 2**20
"""How much of each tensor's data goes into the verdict's key (its start)."""

HANG = "hang"
"""The finding's location for a call that did not return."""


class CrashScreenCheck:
    """Every input set of the check in the engine child first: a crash fails the test
    before the test process calls the engine."""

    name = "crash_screen"
    phase: Phase = "engine"

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        return plan.options.crash_screen

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        __tracebackhide__ = True
        screen = CrashScreen.for_check(plan, context)
        for index, input_set in enumerate(plan.input_sets):
            screen.screen(input_set, "the example inputs" if index == 0 else f"sample {index}")
        return Outcome(record=screen.record())


@dataclass
class CrashScreen:
    """Screens input sets of one program in the engine child (see the module's docstring)."""

    program: AotiProgram
    module: torch.nn.Module
    calls: int
    sidecars: Sidecars | None = None
    triage: Triage | None = None
    screened: int = 0
    """Input sets run in the child by this screen."""
    cached: int = 0
    """Input sets whose verdict was kept from an earlier screen."""
    unprotected: list[str] = field(default_factory=list)
    """Why input sets ran unprotected (one reason each)."""
    _preparation: ChildPreparation | None = None
    _verdicts: dict[str, Any] | None = None

    @classmethod
    def for_check(cls, plan: CheckPlan, context: CheckContext) -> CrashScreen:
        """The screen of one check's engine calls."""
        return cls(context.program, plan.module, context.calls, context.sidecars, context.triage)

    @classmethod
    def where_on(cls, plan: CheckPlan, context: CheckContext) -> CrashScreen | None:
        """The screen of one check's engine calls; None where ``crash_screen`` is off."""
        return cls.for_check(plan, context) if plan.options.crash_screen else None

    def screen(self, input_set: InputSet, label: str) -> None:
        """Run ``input_set`` (``calls`` calls on one engine) in the child; raise the crash
        finding if the child died of it. ``label`` names the input set in the message
        (``the example inputs``, ``sample 1``, ``generated x=(3, 8)``)."""
        __tracebackhide__ = True
        self.screen_all([input_set], [label])

    def screen_all(self, input_sets: Sequence[InputSet], labels: Sequence[str]) -> None:
        """Screen several input sets of one program in one child request (one engine for
        them all, unless the program mutates buffers); raise the crash finding of the first
        that crashed. Cheaper than :meth:`screen` per set: the package is loaded once."""
        __tracebackhide__ = True
        pending: list[tuple[int, str]] = []
        verdicts: dict[int, dict[str, Any]] = {}
        for position, input_set in enumerate(input_sets):
            key = self._key(input_set)
            kept = self._kept().get(key)
            if kept is not None:
                self.cached += 1
                verdicts[position] = kept
                continue
            why_not = self._why_unprotected(input_set)
            if why_not:
                if why_not not in self.unprotected:
                    self.unprotected.append(why_not)
                continue
            pending.append((position, key))
        for chunk in _chunks(pending, [input_sets[position] for position, _ in pending]):
            ran = self._run_many([input_sets[position] for position, _ in chunk])
            for (position, key), verdict in zip(chunk, ran):
                self.screened += 1
                if verdict.get("unprotected"):
                    self.unprotected.append(str(verdict["unprotected"]))
                    continue
                verdicts[position] = verdict
                if verdict["verdict"] != "hang":
                    self._keep(key, verdict)
        for position in sorted(verdicts):
            if verdicts[position]["verdict"] != "ok":
                raise self._failure(verdicts[position], input_sets[position], labels[position])

    def record(self) -> RecordPart:
        """The screen in the check's record: ``crash_screen`` is ``screened``, ``cached``
        or ``unprotected`` (with a note saying why)."""
        if self.unprotected:
            notes = tuple(f"engine calls ran unprotected: {why}" for why in self.unprotected)
            return RecordPart({"crash_screen": "unprotected"}, notes=notes)
        return RecordPart({"crash_screen": "screened" if self.screened else "cached"})

    def _why_unprotected(self, input_set: InputSet) -> str:
        from pytest_aoti.trees import tensor_bytes

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
            from pytest_aoti.compiling.custom_ops import child_preparation

            self._preparation = child_preparation(self.program)
        return self._preparation

    def _run_many(self, input_sets: Sequence[InputSet]) -> list[dict[str, Any]]:
        import torch

        from pytest_aoti.isolation.process import run_jobs
        from pytest_aoti.mutation_maps import flat_user_inputs
        from pytest_aoti.trees import clone_tree

        inputs = []
        for args, kwargs in input_sets:
            flat = flat_user_inputs(self.program.exported, tuple(args), kwargs)
            inputs.append([leaf for leaf in clone_tree(flat) if isinstance(leaf, torch.Tensor)])
        device = self.program.device
        preparation = self._prepared()
        request = {
            "package": str(self.program.package_path),
            "device_index": device.index if device.type == "cuda" else None,
            # one engine for every set, unless each must start from the exported state
            "fresh": bool(self.program.mutated_buffers),
            "inputs": inputs,
            "repeat": self.calls,
            "discard": True,
            **preparation.request(),
        }
        jobs = [(index, False) for index in range(len(inputs))]
        # each set gets the deadline it would get screened alone
        results = run_jobs(request, jobs, SCREEN_TIMEOUT * len(jobs), preparation.path)
        return [_verdict(results[job]) for job in jobs]

    def _failure(self, verdict: dict[str, Any], input_set: InputSet, label: str) -> AotiCheckError:
        finding = crash_finding(verdict, label, self.calls)
        error = AotiCheckError(finding)
        if self.triage is not None and finding.location != HANG:
            error = self.triage.replayed(error, self.module, input_set, self.calls)
        return error

    def _key(self, input_set: InputSet) -> str:
        return f"{SCREEN_FORMAT}:{self.calls}:{inputs_digest(input_set)}"

    def _kept(self) -> dict[str, Any]:
        """The verdicts kept with the package, read once per screen."""
        if self._verdicts is None:
            kept = self.sidecars.sidecar(self.program.key, SIDECAR) if self.sidecars else None
            self._verdicts = dict(kept or {})
        return self._verdicts

    def _keep(self, key: str, verdict: dict[str, Any]) -> None:
        kept = self._kept()
        kept[key] = verdict
        if self.sidecars is None:
            return
        try:
            self.sidecars.keep_sidecar(self.program.key, SIDECAR, dict(kept))
        except OSError:  # a verdict not kept is screened again next time: never a failure
            pass


def _verdict(result: dict[str, Any]) -> dict[str, Any]:
    """One job's result from the child as a verdict: ok, crash (with its signal) or hang."""
    from pytest_aoti.isolation.process import HUNG

    if "unprepared" in result:
        return {
            "unprotected": f"the child could not register the custom ops: {result['unprepared']}"
        }
    crashed = result.get("crashed")
    if crashed is None:
        return {"verdict": "ok"}
    if str(crashed).startswith(HUNG):
        return {"verdict": "hang", "why": crashed}
    number = result.get("signal")
    return {"verdict": "crash", "signal": number, "why": crashed}


def _chunks(
    pending: list[tuple[int, str]], input_sets: Sequence[InputSet]
) -> list[list[tuple[int, str]]]:
    """``pending`` in requests of at most :data:`MAX_SCREEN_BYTES` of inputs each."""
    from pytest_aoti.trees import tensor_bytes

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
    from pytest_aoti.findings import plain_finding

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
        return plain_finding(FindingKind.CRASH, "\n".join((message, *common)), HANG)
    number = verdict.get("signal")
    if number is None:  # the child exited after a CUDA error that sticks to its process
        cause = "hit a CUDA error that poisons its process"
        location = "CUDA error"
    else:
        cause = f"crashed its process ({signal_name(number)})"
        location = signal_name(number)
    message = f"the AOTI compile broke it: the AOTI engine {cause} {where}"
    why = str(verdict.get("why") or "")
    lines = (message, *common, *([f"the child: {why}"] if why else []))
    return plain_finding(FindingKind.CRASH, "\n".join(lines), location, extra={"signal": number})


def inputs_digest(input_set: InputSet) -> str:
    """A key of an input set's structure and values (each tensor's shape, dtype, strides,
    device and the start of its data; every other leaf's repr)."""
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

    if tensor.is_quantized or tensor.layout != torch.strided or tensor.numel() == 0:
        return b""
    flat = tensor.detach().reshape(-1)
    head = flat[: max(1, _DIGEST_BYTES // flat.element_size())].cpu()
    # a fresh dense copy: a one-element view keeps its stride through contiguous()
    start = torch.empty(head.shape, dtype=head.dtype).copy_(head)
    return start.view(torch.uint8).numpy().tobytes()
