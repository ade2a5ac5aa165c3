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

from pytest_aoti.checks.base import CheckContext, CheckPlan, Outcome
from pytest_aoti.errors import AotiCheckError
from pytest_aoti.findings import Finding

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram

    from pytest_aoti.compiling.program import AotiProgram
    from pytest_aoti.compiling.randomness import RandomOp
    from pytest_aoti.tolerance import LeafStats, Tolerance


class RandomCheck:
    """The verdict on a program that draws random numbers (``plan.random_ops``): a failure,
    or with ``random="shapes"`` what can be compared. Never the fp64 rule: its re-run
    draws other numbers again. No check that compares values applies to such a program."""

    name = "random"

    def applies(self, plan: CheckPlan) -> bool:
        return bool(plan.random_ops)

    def run(self, program: AotiProgram, plan: CheckPlan, context: CheckContext) -> Outcome:
        __tracebackhide__ = True
        if plan.random != "shapes":
            raise AotiCheckError(random_finding(plan.random_ops))
        stats, engine = check_shapes_only(
            program, plan.module, plan.input_sets, tolerance=plan.tolerance
        )
        context.engine = context.engine or engine
        return Outcome(stats=tuple(stats), input_sets=len(plan.input_sets))


def random_finding(ops: Sequence[RandomOp]) -> Finding:
    """The failure of a check whose program draws random numbers."""
    names = ", ".join(sorted({op.op for op in ops}))
    return Finding(
        kind="random",
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
    module: torch.nn.Module,
    input_sets: Sequence[tuple[tuple[Any, ...], Mapping[str, Any]]],
    *,
    tolerance: Tolerance,
) -> tuple[list[tuple[str, LeafStats]], Any]:
    """``random="shapes"``: each input set through eager and the engine once; the output
    structure, shapes, dtypes and devices must agree, and the values of outputs no random
    op feeds must match within ``tolerance`` (without the fp64 rule: it re-runs the model,
    whose random draws differ again). Returns the stats and the engine it ran."""
    __tracebackhide__ = True
    import copy

    import torch
    from torch.utils._pytree import keystr, tree_flatten_with_path

    from pytest_aoti.compare import compare_leaf, compare_trees
    from pytest_aoti.compiling.randomness import random_outputs
    from pytest_aoti.trees import clone_tree

    flags = random_outputs(program.exported)
    engine = program.engine_in_exported_state()
    stats: list[tuple[str, LeafStats]] = []
    for index, (args, kwargs) in enumerate(input_sets):
        context = f"sample {index}" if len(input_sets) > 1 else ""
        eager_args, eager_kwargs = clone_tree((tuple(args), dict(kwargs)))
        with torch.no_grad():
            eager_out = clone_tree(copy.deepcopy(module)(*eager_args, **eager_kwargs))
        engine_args, engine_kwargs = clone_tree((tuple(args), dict(kwargs)))
        engine_out = clone_tree(engine(*engine_args, **engine_kwargs))
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
                                kind="random",
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
    return stats, engine


def assert_not_random(exported: ExportedProgram) -> None:
    """Raise the ``random`` finding when ``exported`` draws random numbers."""
    __tracebackhide__ = True
    from pytest_aoti.compiling.randomness import random_ops

    ops = random_ops(exported)
    if ops:
        raise AotiCheckError(random_finding(ops))
