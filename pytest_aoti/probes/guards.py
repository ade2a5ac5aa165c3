"""Whether the exported program accepts a probe's variant: run uncompiled
(``exported.module()``) only on the variants its input checks could refuse."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.utils._pytree as pytree

from pytest_aoti.api import InputBuilder
from pytest_aoti.probes.variants import Variant

if TYPE_CHECKING:
    from torch.export import ExportedProgram

    from pytest_aoti.api import AotiProgram, Float64Reference


@dataclass
class Judged:
    """A variant eager accepted, and whether the exported program accepts it."""

    variant: Variant
    accepted: bool
    eager: tuple[Any, Any] | None = None
    reference: Float64Reference | None = None
    """Eager in float64 on the variant (edge values): the fp64 rule's reference."""


def guard(
    program: AotiProgram,
    judged: list[Judged],
    example: tuple[tuple[Any, ...], Mapping[str, Any]],
) -> None:
    """Whether the exported program accepts each variant inside the contract (``accepted``
    turns False where it refuses it).

    The exported program checks an input's structure, kinds, ranks, sizes and non-tensor
    values (and dtypes and devices, where its graph asserts them), and its values only in
    runtime assertions: a variant that matches the example in all of these, of a program
    without such assertions, is accepted as the example was, and the program (tens of
    milliseconds to build) is not run for it. A layout or an aliasing variant is one; a
    variant of another size along a dim the program exported as static is refused, as the
    program's input checks compare such a dim with its exported size."""
    exported = program.exported
    # read once per search: torch rebuilds call_spec on every access
    placeholders, in_spec = _user_placeholders(exported), exported.call_spec.in_spec
    for item in judged:
        if item.accepted and refused_for_size(in_spec, placeholders, item.variant):
            item.accepted = False
    asked = [item for item in judged if item.accepted]
    if asked and not asserts_values(program):
        seen = checked_form(example)
        asked = [
            item for item in asked if checked_form((item.variant.args, item.variant.kwargs)) != seen
        ]
    if not asked:
        return
    guarded = exported.module()
    if program.mutated_buffers:
        guarded = copy.deepcopy(guarded)  # module() shares the program's own buffers
    for item in asked:
        try:  # only acceptance is read: one copy of the inputs, the outputs dropped
            args, kwargs = InputBuilder.clone_tree(
                (tuple(item.variant.args), dict(item.variant.kwargs))
            )
            with torch.no_grad():
                guarded(*args, **kwargs)
        except Exception:
            item.accepted = False


def _user_placeholders(exported: ExportedProgram) -> list[torch.fx.Node]:
    """The graph's user-input placeholders, in the order its input checks read them."""
    user_inputs = set(exported.graph_signature.user_inputs)
    return [
        node
        for node in exported.graph.nodes
        if node.op == "placeholder" and node.name in user_inputs
    ]


def refused_for_size(in_spec: Any, placeholders: list[torch.fx.Node], variant: Variant) -> bool:
    """Whether the exported program's input checks refuse ``variant`` for certain: a tensor
    of another size along a dim exported as static (``in_spec``: the program's input spec;
    ``placeholders``: its user-input placeholders). False where that cannot be read (the
    program is then run on the variant)."""
    try:
        from torch.export._unlift import _check_inputs_match  # the order its checks read

        flat = _check_inputs_match(tuple(variant.args), dict(variant.kwargs), in_spec)
    except Exception:  # another structure (or torch's helper moved): the program's checks tell
        return False
    if len(placeholders) != len(flat):
        return False
    for (_, given), node in zip(flat, placeholders):
        declared = node.meta.get("val")
        if not isinstance(given, torch.Tensor) or not isinstance(declared, torch.Tensor):
            continue
        if given.dim() == declared.dim() and any(
            isinstance(size, int) and size != actual
            for actual, size in zip(given.shape, declared.shape)
        ):
            return True
    return False


def checked_form(inputs: tuple[tuple[Any, ...], Mapping[str, Any]]) -> tuple[Any, ...]:
    """What the exported program's input checks read of ``inputs``: their structure, and
    per leaf its shape, dtype and device, or its type and value."""
    args, kwargs = inputs
    leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    return (
        str(spec),
        tuple(
            (tuple(leaf.shape), leaf.dtype, leaf.device)
            if isinstance(leaf, torch.Tensor)
            else (type(leaf), repr(leaf))
            for leaf in leaves
        ),
    )


def asserts_values(program: AotiProgram) -> bool:
    """Whether the exported graph asserts anything at run time beyond dtypes and devices:
    a runtime assertion on a size or a value (``_assert_scalar``, ``_assert_async``), a
    range constraint."""
    for node in program.exported.graph.nodes:
        if node.op != "call_function":
            continue
        name = str(getattr(node.target, "__name__", node.target))
        if ("assert" in name or "constrain_range" in name) and "tensor_metadata" not in name:
            return True
    return False


def call_on_clones(
    module: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> tuple[Any, Any]:
    """Outputs and inputs after one call on clones (the variant itself stays as it is)."""
    call_args, call_kwargs = clone_keeping_aliases((args, dict(kwargs)))
    with torch.no_grad():
        outputs = module(*call_args, **call_kwargs)
    return InputBuilder.clone_tree(outputs), (call_args, call_kwargs)


def clone_keeping_aliases(tree: Any) -> Any:
    """A deep copy that keeps the tensors' strides, offsets and sharing of storage."""
    return copy.deepcopy(tree)
