"""Example inputs that share storage, and distinct copies of them.

torch.export specializes a program on aliasing among its example inputs without a guard:
a module that reads five inputs, exported with one tensor passed five times, can come
back as a graph that reads only one of them (pytorch/pytorch#139805), and a mutated input
that aliases another is functionalized wrongly (pytorch/pytorch#139789). Tests pass one
tensor twice all the time; the check therefore runs such a program once more on distinct
inputs with values of their own, where eager and the program must still agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch.export import ExportedProgram


def aliased_inputs(
    program: ExportedProgram, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> list[list[str]]:
    """Groups of user-input names whose tensors share storage, e.g. ``[["x", "y"]]``."""
    import torch

    from pytest_aoti.compiling.signature import named_user_inputs

    groups: dict[tuple[str, int], list[str]] = {}
    for name, leaf in named_user_inputs(program, args, kwargs).items():
        if isinstance(leaf, torch.Tensor) and leaf.layout == torch.strided and leaf.numel():
            storage = leaf.untyped_storage()
            groups.setdefault((str(leaf.device), storage.data_ptr()), []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def distinct_inputs(
    program: ExportedProgram,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    aliased: list[list[str]],
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(args, kwargs)`` with every aliased input replaced by a tensor of its own: same
    shape, dtype, device, layout and value range, values drawn anew (equal values would
    hide a graph that reads one input in place of another)."""
    import torch.utils._pytree as pytree

    from pytest_aoti.compiling.signature import read_signature_names
    from pytest_aoti.strategies import distinct_like

    names = read_signature_names(program)
    replace = {name for group in aliased for name in group}
    ordered = _ordered_kwargs(program, kwargs)
    leaves, spec = pytree.tree_flatten((tuple(args), ordered))
    fresh = [
        distinct_like(leaf, seed=index) if name in replace else leaf
        for index, (name, leaf) in enumerate(zip(names, leaves))
    ]
    new_args, new_kwargs = pytree.tree_unflatten(fresh, spec)
    return tuple(new_args), dict(new_kwargs)


def _ordered_kwargs(program: ExportedProgram, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    # the program flattens keyword inputs in the forward's order, as named_user_inputs does
    in_spec = program.call_spec.in_spec
    if in_spec is None or in_spec.num_children != 2:
        return dict(kwargs)
    kwargs_spec = in_spec.child(1) if hasattr(in_spec, "child") else in_spec.children_specs[1]
    if kwargs_spec.context is None:
        return dict(kwargs)
    return {name: kwargs[name] for name in kwargs_spec.context if name in kwargs}
