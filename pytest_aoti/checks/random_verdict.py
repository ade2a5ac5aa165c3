"""The verdict on a program that draws random numbers.

Eager PyTorch and the engine draw different numbers (and the float64 re-run draws others
again), so their values cannot be compared. By default such a check fails, naming the
random ops and the user's lines. With ``random="shapes"`` it compares what can be: the
output structure, every output's shape, dtype and device, and the values of the outputs
no random op feeds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytest_aoti.checks.base import CheckContext, CheckPlan, Outcome, Phase
from pytest_aoti.errors import AotiCheckError
from pytest_aoti.findings import Finding, FindingKind

if TYPE_CHECKING:
    import torch

    from pytest_aoti.compiling.program import AotiProgram
    from pytest_aoti.compiling.random_ops import RandomOp
    from pytest_aoti.tolerance import LeafStats, Tolerance


class NotRandomCheck:
    """A program that draws random numbers (``context.random_ops``, read from the exported
    graph) fails once exported, before its compile, unless ``random="shapes"``."""

    name = "not random"
    phase: Phase = "exported"

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        return bool(context.random_ops) and plan.options.random != "shapes"

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        __tracebackhide__ = True
        raise AotiCheckError(random_finding(context.random_ops))


class RandomCheck:
    """``random="shapes"``: what can be compared of a program that draws random numbers.
    Never the fp64 rule: its re-run draws other numbers again. No check that compares
    values applies to such a program."""

    name = "random"
    phase: Phase = "engine"

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        # a random program reaches its compile only with random="shapes" (NotRandomCheck)
        return bool(context.random_ops)

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        __tracebackhide__ = True
        stats = check_shapes_only(
            context.program,
            context.fresh_engine(),
            plan.module,
            plan.input_sets,
            tolerance=plan.tolerance,
        )
        return Outcome(stats=tuple(stats), input_sets=len(plan.input_sets))


def random_finding(ops: Sequence[RandomOp]) -> Finding:
    """The failure of a check whose program draws random numbers."""
    names = ", ".join(sorted({op.op for op in ops}))
    return Finding(
        kind=FindingKind.RANDOM,
        location="the program",
        phrase=f"draws random numbers ({names})",
        summary="eager and the AOTI engine draw different ones, so their outputs cannot be "
        "compared",
        details=tuple(f"random op {op.describe()}" for op in ops),
        notes=(
            "a module left in training mode runs dropout: call model.eval() before the check",
            "or move the randomness out of the model (pass the noise or the mask as an input)",
            'or check what can be compared: random="shapes" (output shapes and dtypes, and '
            "the values of outputs no random op feeds)",
        ),
        extra={"random_ops": [op.op for op in ops], "sources": [op.source for op in ops]},
    )


def check_shapes_only(
    program: AotiProgram,
    engine: Any,
    module: torch.nn.Module,
    input_sets: Sequence[tuple[tuple[Any, ...], Mapping[str, Any]]],
    *,
    tolerance: Tolerance,
) -> list[tuple[str, LeafStats]]:
    """``random="shapes"``: each input set through eager and the engine once; the output
    structure, shapes, dtypes and devices must agree, and the values of outputs no random
    op feeds must match within ``tolerance`` (without the fp64 rule: it re-runs the model,
    whose random draws differ again). Returns the stats."""
    __tracebackhide__ = True
    import torch
    from torch.utils._pytree import keystr, tree_flatten_with_path

    from pytest_aoti.checks.side_by_side import call_history
    from pytest_aoti.compare import compare_leaf, compare_trees
    from pytest_aoti.compiling.random_ops import random_outputs

    flags = random_outputs(program.exported)
    stats: list[tuple[str, LeafStats]] = []
    for index, (args, kwargs) in enumerate(input_sets):
        context = f"sample {index}" if len(input_sets) > 1 else ""
        ((eager_out, _),) = call_history(program, module, args, kwargs, 1, eager=True)
        ((engine_out, _),) = call_history(program, engine, args, kwargs, 1)
        eager_leaves, eager_spec = tree_flatten_with_path(eager_out)
        engine_leaves, engine_spec = tree_flatten_with_path(engine_out)
        if eager_spec != engine_spec:
            compare_trees(eager_out, engine_out, what="output", context=context)  # raises
        for position, ((path, want), (_, got)) in enumerate(zip(eager_leaves, engine_leaves)):
            location = f"output{keystr(path)}"
            random = flags[position] if position < len(flags) else True
            if not random:
                leaf = compare_leaf(
                    want, got, location=location, context=context, tolerance=tolerance
                )
                stats.append((context, leaf))
                continue
            if isinstance(want, torch.Tensor) and isinstance(got, torch.Tensor):
                for attribute in ("shape", "dtype", "device"):
                    if getattr(want, attribute) != getattr(got, attribute):
                        raise AotiCheckError(
                            Finding(
                                kind=FindingKind.RANDOM,
                                location=location,
                                attribute=attribute,
                                context=context,
                                summary=f"eager {getattr(want, attribute)}, "
                                f"engine {getattr(got, attribute)}",
                                notes=(
                                    'random="shapes": values of random outputs are not compared',
                                ),
                            )
                        )
    return stats
