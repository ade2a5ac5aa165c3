"""Example inputs that share storage, and distinct copies of them. torch.export specializes
silently on aliased examples (pytorch/pytorch#139805, #139789), so such a program runs once more
on distinct inputs with values of their own."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch.utils._pytree as pytree

from pytest_aoti.checks.base import CheckContext, CheckPlan, Outcome, Phase, Stats
from pytest_aoti.checks.parity import InputRun, sample_label
from pytest_aoti.errors import AotiCheckError
from pytest_aoti.findings import FindingKind
from pytest_aoti.mutation_maps import aliased_inputs, ordered_kwargs, read_signature_names
from pytest_aoti.strategies import distinct_like

if TYPE_CHECKING:
    from torch.export import ExportedProgram


class AliasingCheck:
    """Input sets whose inputs share storage, again on distinct copies (parity only)."""

    name = "aliasing"
    phase: Phase = "engine"

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        return not context.random_ops  # a random program's values cannot match

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        __tracebackhide__ = True
        program = context.program
        stats: Stats = ()
        checked = 0
        for index, (args, kwargs) in enumerate(plan.input_sets):
            if not (aliased := aliased_inputs(program.exported, args, kwargs)):
                continue
            label = sample_label(index, len(plan.input_sets))
            run = InputRun(
                program,
                plan.module,
                *distinct_inputs(program.exported, args, kwargs, aliased),
                tolerance=plan.tolerance,
                label=", ".join(filter(None, [label, "distinct copies of the aliased inputs"])),
                triage=context.triage,
                engine=context.fresh_engine,
            )
            try:
                stats += tuple(run.check(context.calls, None, values_too=False))
            except AotiCheckError as error:
                raise _specialized(error, aliased) from None
            checked += 1
        return Outcome(stats=stats, input_sets=checked)


def _specialized(error: AotiCheckError, aliased: list[list[str]]) -> AotiCheckError:
    described = "; ".join(", ".join(group) for group in aliased)
    finding = error.finding
    return error.amended(
        replace(
            finding,
            kind=FindingKind.ALIASING,
            lead=f"aliased example inputs ({described} share storage)",
            notes=(
                *finding.notes,
                "torch.export specializes a program on aliasing among its example "
                "inputs, without a guard (pytorch/pytorch#139805; a mutated input that "
                "aliases another: #139789): the program is right only for callers "
                "that pass the same aliasing",
                "export with distinct example tensors (e.g. y=x.clone()) unless every "
                "caller passes these inputs aliased",
            ),
            extra={**finding.extra, "aliased": aliased},
        )
    )


def distinct_inputs(
    program: ExportedProgram,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    aliased: list[list[str]],
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(args, kwargs)`` with every aliased input replaced by one of its own: same shape, dtype,
    device, layout and range, new values (equal ones would hide a graph reading the wrong input)."""
    names = read_signature_names(program)
    replaced = {name for group in aliased for name in group}
    leaves, spec = pytree.tree_flatten((tuple(args), ordered_kwargs(program, kwargs)))
    fresh = [
        distinct_like(leaf, seed=index) if name in replaced else leaf
        for index, (name, leaf) in enumerate(zip(names, leaves))
    ]
    new_args, new_kwargs = pytree.tree_unflatten(fresh, spec)
    return tuple(new_args), dict(new_kwargs)
