"""The verdict on a program that draws random numbers: by default a failure naming the random
ops; with ``random="shapes"``, the structure, shapes, dtypes, devices, and the values of outputs
no random op feeds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pytest_aoti.checks.base import CheckContext, CheckPlan, Outcome, Phase
from pytest_aoti.checks.side_by_side import call_history
from pytest_aoti.compiling.random_ops import RandomOp, random_outputs
from pytest_aoti.errors import AotiCheckError
from pytest_aoti.findings import Finding, FindingKind

if TYPE_CHECKING:
    from pytest_aoti.tolerance import LeafStats


class RandomRefusedCheck:
    """A random program fails once exported, before its compile, unless ``random="shapes"``."""

    name = "not random"
    phase: Phase = "exported"

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        return bool(context.random_ops) and plan.options.random != "shapes"

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        __tracebackhide__ = True
        raise AotiCheckError(random_finding(context.random_ops))


class RandomCheck:
    """``random="shapes"``: what can be compared of a random program (never the fp64 rule)."""

    name = "random"
    phase: Phase = "engine"

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        # a random program reaches its compile only with random="shapes" (RandomRefusedCheck)
        return bool(context.random_ops)

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        """Each input set once through eager and the engine; structure, shapes, dtypes and
        devices must agree, and outputs no random op feeds match within the tolerance."""
        __tracebackhide__ = True
        import torch  # torch loads on first use
        from torch.utils._pytree import keystr, tree_flatten_with_path

        from pytest_aoti.compare import compare_leaf, compare_trees

        program, engine, input_sets = context.program, context.fresh_engine(), plan.input_sets
        flags = random_outputs(program.exported)
        stats: list[tuple[str, LeafStats]] = []
        for index, (args, kwargs) in enumerate(input_sets):
            label = f"sample {index}" if len(input_sets) > 1 else ""
            ((eager_out, _),) = call_history(program, plan.module, args, kwargs, 1, eager=True)
            ((engine_out, _),) = call_history(program, engine, args, kwargs, 1)
            eager_leaves, eager_spec = tree_flatten_with_path(eager_out)
            engine_leaves, engine_spec = tree_flatten_with_path(engine_out)
            if eager_spec != engine_spec:
                compare_trees(eager_out, engine_out, what="output", context=label)  # raises
            for position, ((path, want), (_, got)) in enumerate(zip(eager_leaves, engine_leaves)):
                location = f"output{keystr(path)}"
                if position < len(flags) and not flags[position]:  # fed by no random op
                    leaf = compare_leaf(
                        want, got, location=location, context=label, tolerance=plan.tolerance
                    )
                    stats.append((label, leaf))
                elif isinstance(want, torch.Tensor) and isinstance(got, torch.Tensor):
                    for attribute in ("shape", "dtype", "device"):
                        if getattr(want, attribute) != getattr(got, attribute):
                            raise AotiCheckError(
                                Finding(
                                    kind=FindingKind.RANDOM,
                                    location=location,
                                    attribute=attribute,
                                    context=label,
                                    summary=f"eager {getattr(want, attribute)}, "
                                    f"engine {getattr(got, attribute)}",
                                    notes=(
                                        'random="shapes": values of random outputs are not compared',
                                    ),
                                )
                            )
        return Outcome(stats=tuple(stats), input_sets=len(input_sets))


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
