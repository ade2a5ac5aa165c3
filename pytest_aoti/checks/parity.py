"""Parity per input set: eager PyTorch and a fresh AOTI engine, compared call by call.
:class:`InputRun` is one input set's run, which aliasing and generated shapes reuse; failures go
to the check's :class:`~pytest_aoti.checks.base.Triage`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.utils._pytree as pytree

from pytest_aoti.checks.base import (
    CheckContext,
    CheckPlan,
    Outcome,
    Phase,
    RecordPart,
    Stats,
    Triage,
)
from pytest_aoti.checks.eager import eager_finding
from pytest_aoti.checks.eager_history import EagerCall, EagerRaised, record_eager
from pytest_aoti.checks.float64 import Float64Reference
from pytest_aoti.checks.module_guard import AttributeChange, ModuleCopies, describe_changes
from pytest_aoti.checks.state import BufferReadBack, BufferState, compare_buffers, merge_states
from pytest_aoti.compare import assert_unchanged, assert_values, compare_leaf, compare_trees
from pytest_aoti.errors import AotiCheckError
from pytest_aoti.findings import Finding, FindingKind
from pytest_aoti.mutation_maps import named_user_inputs
from pytest_aoti.tolerance import LeafStats, Tolerance
from pytest_aoti.torch_bugs import BUFFER_STATE_NOT_CARRIED
from pytest_aoti.trees import clone_like, clone_tree

if TYPE_CHECKING:
    from pytest_aoti.compiling.program import AotiProgram


class ParityCheck:
    """Outputs, inputs and mutated buffers after each call, on the example and each sample."""

    name = "parity"
    figures = ("buffers",)
    """The figures its outcome reports (the :class:`~pytest_aoti.CheckResult`'s names)."""
    phase: Phase = "engine"

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        return not context.random_ops  # a random program's values cannot match

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        __tracebackhide__ = True
        program = context.program
        stats: Stats = ()
        buffers: list[BufferState] = []
        changes: list[AttributeChange] = []
        for index, (args, kwargs) in enumerate(plan.input_sets):
            run = InputRun(
                program,
                plan.module,
                args,
                kwargs,
                tolerance=plan.tolerance,
                label=sample_label(index, len(plan.input_sets)),
                triage=context.triage,
                engine=context.fresh_engine,
            )
            stats += tuple(
                run.check(
                    context.calls, plan.mutates, values_too=index == 0, expect_at=plan.expect_at
                )
            )
            buffers += run.buffers
            changes += [c for c in run.attribute_changes if c.path not in {d.path for d in changes}]
        # eager's answers did not move with the attribute (a lazily built value): a note
        noted = RecordPart(
            notes=(f"{describe_changes(changes)} (eager's answers still match the engine's)",)
            if changes
            else ()
        )
        if not buffers:
            return Outcome(stats=stats, input_sets=len(plan.input_sets), record=noted)
        states = merge_states(buffers)
        record = noted + RecordPart(
            {"buffers": [state.to_json() for state in states]},
            # never silence: the record and the summary say so
            notes=tuple(
                f"state of '{state.name}' not verified: {state.reason}"
                for state in states
                if not state.verified
            ),
        )
        return Outcome(
            stats=stats, input_sets=len(plan.input_sets), figures={"buffers": states}, record=record
        )


def sample_label(index: int, count: int) -> str:
    """``sample 1``: which input set, where the check has more than one."""
    return f"sample {index}" if count > 1 else ""


class InputRun:
    """Eager and engine side by side on their own clones of one input set: eager on
    :func:`~pytest_aoti.checks.side_by_side.eager_module`'s copy (``copies``: the copy a
    search's input sets share, :meth:`module_copies`), the engine in its exported state
    (``engine``: default the program's). They never share a tensor. ``inputs_owned``: the
    caller never changes ``args`` and ``kwargs`` while the run lives (a search's drawn input
    set), so they are not cloned first; ``validated``: they have the shapes, dtypes, devices
    and layout of inputs the program validated (a draw of the example's values), so
    :meth:`check` does not validate them again. Where eager itself raises on the inputs,
    the run raises :attr:`EagerRaised` (the module refuses them: no finding)."""

    EagerRaised: ClassVar[type[EagerRaised]] = EagerRaised

    def __init__(
        self,
        program: AotiProgram,
        module: torch.nn.Module,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        *,
        tolerance: Tolerance,
        label: str = "",
        triage: Triage | None = None,
        attribute: bool = True,
        engine: Callable[[], Any] | None = None,
        copies: ModuleCopies | None = None,
        inputs_owned: bool = False,
        validated: bool = False,
    ) -> None:
        self.program = program
        self.module = module
        self._attribute = attribute
        self.tolerance = tolerance
        self.label = label
        self._originals = (
            (tuple(args), dict(kwargs)) if inputs_owned else clone_tree((tuple(args), dict(kwargs)))
        )
        self._copies = copies
        self._reference = Float64Reference(
            program,
            module,
            *self._originals,
            shared=copies.float64 if copies is not None else None,
        )
        self._named: dict[str, Any] | None = None
        self._validated = validated
        self._triage = triage
        self._engine = engine or program.engine_in_exported_state
        self._history: list[EagerCall] = []
        self.buffers: list[BufferState] = []
        """How each buffer the program mutates was compared with eager's in the last run."""

    def check(
        self,
        calls: int,
        mutates: Mapping[str, Any] | None,
        *,
        values_too: bool,
        expect_at: int | None = None,
        eager_refusals: bool = False,
    ) -> list[tuple[str, LeafStats]]:
        """Run ``calls`` calls on both sides, comparing after each, and the expected values after
        call ``expect_at`` (default: the last). ``eager_refusals``: where the module raises, raise
        :class:`EagerRaised` (else fail with stage ``"eager"``). ``values_too``: also check plain
        ``mutates`` values (first input set only). A difference goes to the triage first."""
        __tracebackhide__ = True
        if not self._validated:
            self.program.validate(*self._originals[0], **self._originals[1])
        try:
            if calls == 1 and any(call.attributes for call in self.eager_history(1)):
                calls = 2  # a changed attribute shows in the next call: make it
            self.eager_history(calls)
        except EagerRaised as raised:
            if eager_refusals:
                raise
            finding = eager_finding(raised.error)
            context = self.label or finding.context
            raise AotiCheckError(replace(finding, context=context)) from raised.error
        engine = self._engine()
        try:
            return self._run(
                engine, calls, mutates, values_too=values_too, expect_at=expect_at or calls
            )
        except AotiCheckError as error:
            if self._triage is None:
                raise
            raise self._triage.explain(error, self, calls, attribute=self._attribute) from None

    @staticmethod
    def module_copies(module: torch.nn.Module) -> ModuleCopies:
        """The copies of ``module`` that the input sets of one search share (pass it to each
        as ``copies``): eager's and a float64 one, each made once and put back in its first
        state before every input set."""
        return ModuleCopies(module)

    @property
    def named_originals(self) -> dict[str, Any]:
        """The input set as the check received it, by user-input name (read once)."""
        if self._named is None:
            self._named = named_user_inputs(self.program.exported, *self._originals)
        return self._named

    def _clone_named(self) -> tuple[tuple[tuple[Any, ...], dict[str, Any]], dict[str, Any]]:
        """A clone of the input set, and its user inputs by name: read off
        :attr:`named_originals` where each tensor of the set is a tensor of its own."""
        named = self.named_originals
        tensors = [id(leaf) for leaf in named.values() if isinstance(leaf, torch.Tensor)]
        if len(set(tensors)) < len(tensors):  # one tensor given twice: named anew
            args, kwargs = clone_tree(self._originals)
            return (args, kwargs), named_user_inputs(self.program.exported, args, kwargs)
        clones: dict[int, torch.Tensor] = {}

        def clone(leaf: Any) -> Any:
            if not isinstance(leaf, torch.Tensor):
                return leaf
            clones[id(leaf)] = copied = clone_like(leaf)
            return copied

        args, kwargs = pytree.tree_map(clone, self._originals)
        by_name = {
            name: clones[id(leaf)] if isinstance(leaf, torch.Tensor) else leaf
            for name, leaf in named.items()
        }
        return (args, kwargs), by_name

    def fresh_inputs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """New clones of this run's input set, as the check received it."""
        return clone_tree(self._originals)  # type: ignore[no-any-return]

    def differs_with(self, replacement: Callable[..., Any], calls: int) -> bool:
        """Whether ``replacement`` (an uncompiled program) differs from eager here."""
        try:
            self._run(replacement, calls, None, engine_is_compiled=False)
        except AotiCheckError:
            return True
        return False

    def eager_history(self, calls: int) -> list[EagerCall]:
        """Eager's first ``calls`` calls, recorded once per input set; EagerRaised if it raises."""
        __tracebackhide__ = True
        if len(self._history) < calls:
            self._history = record_eager(
                self.program,
                self.module,
                calls,
                context=self._context,
                label=self.label,
                copies=self._copies,
                named_inputs=self.named_originals,
                cloned=self._clone_named(),
            )
        return self._history[:calls]

    @property
    def attribute_changes(self) -> tuple[AttributeChange, ...]:
        """The Python attributes eager's calls changed (:mod:`.module_guard`)."""
        changes: dict[str, AttributeChange] = {}
        for call in self._history:
            for change in call.attributes:
                changes.setdefault(change.path, change)
        return tuple(changes.values())

    def _run(
        self,
        engine: Callable[..., Any],
        calls: int,
        mutates: Mapping[str, Any] | None,
        *,
        values_too: bool = False,
        expect_at: int = 1,
        engine_is_compiled: bool = True,
    ) -> list[tuple[str, LeafStats]]:
        """``engine`` against eager's history, call by call (a replay, uncompiled: parity only)."""
        __tracebackhide__ = True
        history = self.eager_history(calls)
        (engine_args, engine_kwargs), engine_inputs = self._clone_named()
        addresses = {
            name: leaf.data_ptr()
            for name, leaf in engine_inputs.items()
            if isinstance(leaf, torch.Tensor) and engine_is_compiled
        }
        stats: list[tuple[str, LeafStats]] = []
        # the engine's buffers, read back from a second instance of its compiled library
        state = (
            BufferReadBack(self.program, self._originals, self.tolerance)
            if engine_is_compiled and self.program.mutated_buffers
            else None
        )
        for call in range(1, calls + 1):
            context = self._context(call, calls)
            eager = history[call - 1]
            try:
                engine_out = clone_tree(engine(*engine_args, **engine_kwargs))
                # a buffer found wrong beats an output it feeds later
                if state is not None:
                    stats += state.after_call(
                        context, eager.buffers, self._reference.buffer_at(call)
                    )
                    self.buffers = state.states
                elif not engine_is_compiled and isinstance(engine, torch.nn.Module):
                    # a replayed program (stage attribution) holds its buffers itself
                    compare_buffers(
                        eager.buffers,
                        dict(engine.named_buffers()),
                        sorted(self.program.mutated_buffers),
                        context=context,
                        tolerance=self.tolerance,
                    )
                stats += self._compare_call(
                    call, context, eager, engine_out, engine_inputs, addresses
                )
                if engine_is_compiled and mutates and call == expect_at:
                    stats += self._check_expected(
                        mutates, eager.inputs, engine_inputs, call, values_too
                    )
            except AotiCheckError as error:
                finding = error.finding.with_call(call, calls, self.label, error.finding.context)
                raise error.amended(self._explained(finding, call)) from None
        return stats

    def _compare_call(
        self,
        call: int,
        context: str,
        eager: EagerCall,
        engine_out: Any,
        engine_inputs: Mapping[str, Any],
        addresses: Mapping[str, int],
    ) -> list[tuple[str, LeafStats]]:
        """One call's outputs and inputs against eager's; ``addresses``: where each input
        lay before the call (empty: a replay, whose inputs may move)."""
        __tracebackhide__ = True
        stats = [
            (context, leaf)
            for leaf in compare_trees(
                eager.outputs,
                engine_out,
                what="output",
                context=context,
                tolerance=self.tolerance,
                reference=self._reference.outputs_after(call),
                scalar_dtypes=self.program.scalar_output_dtypes,
                accumulates=self.program.accumulation.outputs,
            )
        ]
        mutated = self.program.mutated_inputs
        for name, engine_leaf in engine_inputs.items():
            if not isinstance(engine_leaf, torch.Tensor):
                continue
            location = f"input '{name}'"
            if name not in mutated:
                assert_unchanged(
                    self.named_originals[name], engine_leaf, location=location, context=context
                )
            elif name in addresses:
                _assert_in_place(engine_leaf, addresses[name], location, context)
            leaf = compare_leaf(
                eager.inputs[name],
                engine_leaf,
                location=location,
                context=context,
                tolerance=self.tolerance,
                reference=self._reference.input_after(call, name),
                accumulates=self.program.accumulation.inputs.get(name, 0),
            )
            stats.append((context, leaf))
        return stats

    def _check_expected(
        self,
        mutates: Mapping[str, Any],
        eager_inputs: Mapping[str, Any],
        engine_inputs: Mapping[str, Any],
        call: int,
        values_too: bool,
    ) -> list[tuple[str, LeafStats]]:
        __tracebackhide__ = True
        context = self._context(call, call, after=True)
        stats = []
        for name, expected in mutates.items():
            if callable(expected):
                args, kwargs = clone_tree(self._originals)
                expected = expected(*args, **kwargs)
            elif not values_too:
                continue
            location = f"input '{name}'"
            try:
                leaf = assert_values(
                    expected,
                    engine_inputs[name],
                    location=location,
                    context=context,
                    tolerance=self.tolerance,
                )
            except AotiCheckError as error:
                raise _expectation_or(
                    error, expected, eager_inputs[name], location, context, self.tolerance
                ) from None
            stats.append((context, leaf))
        return stats

    def _explained(self, finding: Finding, call: int) -> Finding:
        """``finding`` with what explains it: an attribute export froze, or carried buffers."""
        changes = self.attribute_changes
        if changes and FindingKind(finding.kind).is_parity:
            return replace(
                finding,
                lead=describe_changes(list(changes)),
                stage="export",
                kind=FindingKind.ATTRIBUTE,
                extra={**finding.extra, "attributes": [change.path for change in changes]},
            )
        return self._stateful(finding, call)

    def _stateful(self, finding: Finding, call: int) -> Finding:
        """Name the mutated buffers when a stateful program diverges after its first call."""
        buffers = self.program.mutated_buffers
        if call < 2 or not buffers or not FindingKind(finding.kind).is_parity:
            return finding
        verified = {state.name for state in self.buffers if state.verified}
        if buffers <= verified:  # read back and equal to eager's: the state is not the cause
            return finding
        names = ", ".join(repr(name) for name in sorted(buffers))
        return replace(
            finding,
            kind=FindingKind.BUFFER,
            lead=f"buffer state diverges ({names})",
            details=(
                f"the program mutates registered buffer{'s' if len(buffers) > 1 else ''} "
                f"{names}; call 1 matched, so the state the engine carried into call {call} "
                "differs from eager's",
                *(
                    [f"a known torch bug on this torch: {BUFFER_STATE_NOT_CARRIED.reason()}"]
                    if BUFFER_STATE_NOT_CARRIED.possible_in()
                    else []
                ),
                *finding.details,
            ),
            extra={**finding.extra, "buffers": sorted(buffers)},
        )

    def _context(self, call: int, calls: int, *, after: bool = False) -> str:
        parts = []
        if after:
            parts.append(f"after {calls} call{'s' if calls > 1 else ''}")
        elif calls > 1:
            parts.append(f"call {call} of {calls}")
        if self.label:
            parts.append(self.label)
        return ", ".join(parts)


def _expectation_or(
    error: AotiCheckError,
    expected: Any,
    eager_value: Any,
    location: str,
    context: str,
    tolerance: Tolerance,
) -> AotiCheckError:
    """Kind ``expected value`` where eager produces it, else ``expectation`` (that is wrong)."""
    try:
        assert_values(
            expected, eager_value, location=location, context=context, tolerance=tolerance
        )
    except AotiCheckError as eager_error:
        return error.amended(
            replace(
                eager_error.finding,
                kind=FindingKind.EXPECTATION,
                phrase="has a wrong expected value in mutates=: eager PyTorch does not "
                "produce it either",
                actual_name="eager",
                notes=("eager and the AOTI engine agree: the expectation is what is wrong",),
            )
        )
    return error.amended(replace(error.finding, kind=FindingKind.EXPECTED_VALUE))


def _assert_in_place(tensor: torch.Tensor, address: int, location: str, context: str) -> None:
    __tracebackhide__ = True
    if tensor.data_ptr() != address:
        raise AotiCheckError(
            Finding(
                kind=FindingKind.IN_PLACE,
                location=location,
                phrase="was not updated in place by the AOTI engine",
                summary="its storage moved, so callers holding the tensor would see stale values",
                context=context,
                stage="compile",
            )
        )
