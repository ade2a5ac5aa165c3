"""A decode loop on both sides: eager and the engine each run their own chain of calls, each
call's inputs built by the test's ``next_inputs`` from that side's last outputs, and the two
are compared at every step.

Each side feeds itself, as a server does: a difference carries forward and grows as it would
in deployment. A discrete output (an integer or bool: a greedy token) that differs while
every floating leaf of the step is within tolerance is a tie, not a bug: the step is
recorded as one and the engine's chain goes on from a copy of eager's next inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, asdict, dataclass, field, replace
from typing import Any

import torch
import torch.utils._pytree as pytree

from pytest_aoti.checks.base import InputSet
from pytest_aoti.checks.eager_history import EagerRaised
from pytest_aoti.checks.float64 import Float64Reference
from pytest_aoti.checks.replay import InputReplay
from pytest_aoti.compare import compare_leaf, compare_trees
from pytest_aoti.errors import AotiCheckError, AotiInputError, AotiUsageError
from pytest_aoti.mutation_maps import named_user_inputs
from pytest_aoti.tolerance import LeafStats, Tolerance
from pytest_aoti.trees import clone_tree

NextInputs = Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]
"""``next_inputs(outputs, args, kwargs) -> (args, kwargs)``: the next call's inputs."""


@dataclass
class StepFigures:
    """What one step measured: its largest errors over every compared leaf."""

    step: int
    max_abs: float = 0.0
    max_rel: float = 0.0
    tie: str | None = None
    """Where a discrete output differed within tolerance (the engine went on from eager's)."""

    def to_json(self) -> dict[str, Any]:
        return {
            key: value for key, value in asdict(self).items() if key != "tie" or value is not None
        }


@dataclass
class Chain:
    """The two chains of one check: what each step measured, and the stats of every leaf."""

    steps: int
    figures: list[StepFigures] = field(default_factory=list)
    stats: list[tuple[str, LeafStats]] = field(default_factory=list)
    buffers: str = "none"
    """How the program's mutated buffers were compared: ``none`` (it mutates none),
    ``read back`` (from the engine after every step), or why they were not."""


@dataclass(eq=False)
class StepsRun:
    """``steps`` calls on each side of ``program``, from ``inputs``, fed by ``next_inputs``."""

    program: Any
    module: torch.nn.Module
    inputs: InputSet
    _: KW_ONLY
    steps: int
    next_inputs: NextInputs
    tolerance: Tolerance
    eager: torch.nn.Module
    engine: Callable[..., Any]
    float64: Callable[[], torch.nn.Module] | None
    screen: Callable[[InputSet, int], None] | None = None
    buffers: Callable[[], Mapping[str, Any]] | None = None
    """The engine's buffers after its last call, by name."""
    buffers_reason: str = "none"
    follow_eager: bool = False
    """Each engine step on a copy of eager's inputs of the step (no drift carried):
    where extreme values would make rounding grow over the steps, a step's own fault
    still shows."""
    step_inputs: list[InputSet] = field(default_factory=list, init=False)
    """Eager's inputs of each step so far, before its call: what a repro bundle replays."""

    def __post_init__(self) -> None:
        self.chain = Chain(self.steps, buffers=self.buffers_reason)

    def run(self) -> Chain:
        """Both chains, compared at every step; raises the first step's difference."""
        __tracebackhide__ = True
        eager_inputs = clone_tree(self.inputs)
        engine_inputs = clone_tree(self.inputs)
        for step in range(1, self.steps + 1):
            context = f"step {step} of {self.steps}"
            self._validate(engine_inputs, step)
            before = clone_tree(eager_inputs)
            self.step_inputs.append(before)
            eager_out = self._eager_call(eager_inputs, step)
            if self.screen is not None:
                self.screen(engine_inputs, step)
            with torch.no_grad():
                engine_out = clone_tree(self.engine(*engine_inputs[0], **engine_inputs[1]))
            figures = StepFigures(step)
            try:
                tie = self._compare(
                    step,
                    context,
                    before,
                    eager_out,
                    engine_out,
                    eager_inputs,
                    engine_inputs,
                    figures,
                )
            except AotiCheckError as error:
                raise self._at_step(error, step) from None
            self.chain.figures.append(figures)
            if step == self.steps:
                break
            eager_next = self._next(eager_out, eager_inputs, "eager", step)
            if tie is not None or self.follow_eager:
                figures.tie = tie
                engine_inputs = clone_tree(eager_next)
            else:
                engine_inputs = self._next(engine_out, engine_inputs, "engine", step)
            eager_inputs = eager_next
        return self.chain

    def _validate(self, inputs: InputSet, step: int) -> None:
        """The step's inputs fit the exported program (a growing sequence stays inside the
        ranges it was exported for), else a usage error naming the step."""
        __tracebackhide__ = True
        try:
            self.program.validate(*inputs[0], **inputs[1])
        except AotiInputError as error:
            if step == 1:
                raise
            raise AotiInputError(
                f"step {step} of {self.steps}: the inputs next_inputs built do not fit the "
                f"exported program: {error}. Export with ranges that hold every step's "
                "shapes (a larger max of the Dim), or run fewer steps"
            ) from None

    def _eager_call(self, inputs: InputSet, step: int) -> Any:
        __tracebackhide__ = True
        try:
            with torch.no_grad():
                return clone_tree(self.eager(*inputs[0], **inputs[1]))
        except Exception as error:  # the module's own error, on inputs its own chain built
            raise EagerRaised(error) from error

    def _next(self, outputs: Any, inputs: InputSet, side: str, step: int) -> InputSet:
        """The next step's inputs of one side: ``next_inputs`` on its own outputs and inputs."""
        __tracebackhide__ = True
        args, kwargs = inputs
        try:
            built = self.next_inputs(outputs, args, kwargs)
        except Exception as error:
            raise AotiUsageError(
                f"next_inputs raised on the {side} chain's step {step}: "
                f"{type(error).__name__}: {error}"
            ) from error
        if (
            not isinstance(built, tuple)
            or len(built) != 2
            or not isinstance(built[0], (tuple, list))
            or not isinstance(built[1], Mapping)
        ):
            raise AotiUsageError(
                "next_inputs must return (args, kwargs): a tuple of the next call's "
                f"positional inputs and a dict of its keyword inputs, got {type(built).__name__}"
            )
        return tuple(built[0]), dict(built[1])

    def _compare(
        self,
        step: int,
        context: str,
        before: InputSet,
        eager_out: Any,
        engine_out: Any,
        eager_inputs: InputSet,
        engine_inputs: InputSet,
        figures: StepFigures,
    ) -> str | None:
        """Compare one step's outputs, mutated inputs and buffers; the location of a tie
        (a discrete output alone differing), else None."""
        __tracebackhide__ = True
        reference = self._reference(before)
        floating, discrete = _split(eager_out), _split(engine_out)
        stats = [
            (context, leaf)
            for leaf in compare_trees(
                floating[0],
                discrete[0],
                what="output",
                context=context,
                tolerance=self.tolerance,
                reference=(lambda: _split(reference.outputs_after(1)())[0])
                if reference is not None
                else None,
            )
        ]

        def compared(
            eager: Any, engine: Any, location: str, reference: Any = None
        ) -> tuple[str, LeafStats]:
            __tracebackhide__ = True
            return context, compare_leaf(
                eager,
                engine,
                location=location,
                context=context,
                tolerance=self.tolerance,
                reference=reference,
            )

        eager_named = named_user_inputs(self.program.exported, *eager_inputs)
        engine_named = named_user_inputs(self.program.exported, *engine_inputs)
        stats += [
            compared(
                eager_named[name],
                engine_named[name],
                f"input '{name}'",
                reference.input_after(1, name) if reference else None,
            )
            for name in sorted(self.program.mutated_inputs)
        ]
        if self.buffers is not None:
            engine_buffers = self.buffers()
            live = dict(self.eager.named_buffers())
            stats += [
                compared(live[name], engine_buffers[name], f"buffer '{name}'")
                for name in sorted(self.program.mutated_buffers)
            ]
        for _, leaf in stats:
            figures.max_abs = max(figures.max_abs, leaf.max_abs)
            figures.max_rel = max(figures.max_rel, leaf.max_rel)
        self.chain.stats += stats
        try:
            compare_trees(floating[1], discrete[1], what="output", context=context)
        except AotiCheckError as error:
            has_floats = any(
                isinstance(leaf, torch.Tensor) for leaf in pytree.tree_leaves(floating[0])
            )
            if not has_floats:
                raise
            return error.finding.location or "a discrete output"
        return None

    def _reference(self, before: InputSet) -> Float64Reference | None:
        """Eager in float64 on eager's inputs of the step (a program without buffer state:
        with buffers, the float64 copy would start from their first values)."""
        if self.float64 is None or self.program.mutated_buffers:
            return None
        return Float64Reference(self.program, self.module, *before, shared=self.float64)

    def _at_step(self, error: AotiCheckError, step: int) -> AotiCheckError:
        """``error`` as the first step that differs, with the largest error of each step
        before it (a drift that grows shows as such); its repro bundle replays the chain up
        to that step, each call on eager's inputs of its step (the buffers' state of the
        step comes from the calls before it)."""
        finding = error.finding
        earlier = ", ".join(
            f"{f.step}: {f.max_abs:.3g}" + (" (tie)" if f.tie else "") for f in self.chain.figures
        )
        details = (
            f"the first step that differs is step {step} of {self.steps} (each side fed by "
            "its own outputs through next_inputs)",
            *(
                [f"largest abs error of each step before it: {earlier}"]
                if earlier
                else ["the first step: the example itself"]
            ),
            *finding.details,
        )
        extra = {
            **finding.extra,
            "steps": {
                "failed_step": step,
                "per_step": [f.to_json() for f in self.chain.figures],
            },
        }
        amended = error.amended(replace(finding, details=details, extra=extra))
        first = self.step_inputs[0]
        amended.replay = InputReplay(
            self.module,
            tuple(first[0]),
            dict(first[1]),
            step,
            step_inputs=tuple(self.step_inputs[:step]),
        )
        return amended


def _split(tree: Any) -> tuple[Any, Any]:
    """``tree`` twice: its floating (and other) leaves with discrete tensors (integer, bool)
    as None, and its discrete tensors with the others as None."""

    def discrete(leaf: Any) -> bool:
        return isinstance(leaf, torch.Tensor) and not (
            leaf.is_floating_point() or leaf.is_complex()
        )

    return (
        pytree.tree_map(lambda leaf: None if discrete(leaf) else leaf, tree),
        pytree.tree_map(lambda leaf: leaf if discrete(leaf) else None, tree),
    )
