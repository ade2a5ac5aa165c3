"""What an exported program says about mutation: mutated inputs, mutated buffers, output kinds.

``torch.export.export`` returns a training-IR program whose signature still holds in-place
ops and empty mutation maps; only ``run_decompositions()`` turns ``x.mul_(2)`` into
``aten.mul`` plus a ``USER_INPUT_MUTATION`` output. These maps are therefore read from the
decomposed program. Their keys are output node names that change with the op
(``mul``, ``add``, ``slice_scatter``), so only the values (input names, buffer FQNs) are kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch.export import ExportedProgram


@dataclass(frozen=True)
class MutationSignature:
    """Plain-data summary of a decomposed program's graph signature.

    It holds no torch objects, so it can be stored beside a cached package and the
    decomposition skipped on a cache hit.
    """

    user_inputs: tuple[str, ...]
    """Names of the user inputs in flattening order (tensor and constant inputs)."""
    mutated_inputs: frozenset[str]
    """User inputs the program writes to (values of ``user_inputs_to_mutate``)."""
    mutated_buffers: frozenset[str]
    """Buffer FQNs the program writes to (values of ``buffers_to_mutate``)."""
    output_kinds: tuple[str, ...]
    """``OutputKind`` names of every graph output, e.g. ``USER_INPUT_MUTATION``."""

    def to_json(self) -> dict[str, Any]:
        return {
            "user_inputs": list(self.user_inputs),
            "mutated_inputs": sorted(self.mutated_inputs),
            "mutated_buffers": sorted(self.mutated_buffers),
            "output_kinds": list(self.output_kinds),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MutationSignature:
        return cls(
            user_inputs=tuple(data["user_inputs"]),
            mutated_inputs=frozenset(data["mutated_inputs"]),
            mutated_buffers=frozenset(data["mutated_buffers"]),
            output_kinds=tuple(data["output_kinds"]),
        )


def read_signature(decomposed: ExportedProgram) -> MutationSignature:
    """Summarize the mutation maps of a program returned by ``run_decompositions()``."""
    signature = decomposed.graph_signature
    return MutationSignature(
        user_inputs=read_signature_names(decomposed),
        mutated_inputs=frozenset(signature.user_inputs_to_mutate.values()),
        mutated_buffers=frozenset(signature.buffers_to_mutate.values()),
        output_kinds=tuple(spec.kind.name for spec in signature.output_specs),
    )


def flat_user_inputs(
    program: ExportedProgram, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> list[Any]:
    """Flatten ``(args, kwargs)`` in the order of the program's user inputs.

    torch.export orders keyword arguments by the forward's signature, not by the order
    the caller wrote them, so they are reordered with the program's own input spec.
    """
    import torch.utils._pytree as pytree

    in_spec = program.call_spec.in_spec
    ordered_kwargs = dict(kwargs)
    if in_spec is not None and in_spec.num_children == 2:
        # ``child()`` replaced ``children_specs`` in torch 2.10; older releases lack it.
        kwargs_spec = in_spec.child(1) if hasattr(in_spec, "child") else in_spec.children_specs[1]
        if kwargs_spec.context is not None:
            ordered_kwargs = {name: kwargs[name] for name in kwargs_spec.context if name in kwargs}
    leaves, _ = pytree.tree_flatten((tuple(args), ordered_kwargs))
    return leaves


def named_user_inputs(
    program: ExportedProgram, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """Map each user-input name of ``program`` to the caller's leaf object.

    Names are those of the graph signature: ``x`` for a tensor argument, ``xs_0`` for the
    first element of a list argument, the keyword for a keyword argument.
    """
    names = read_signature_names(program)
    leaves = flat_user_inputs(program, args, kwargs)
    if len(names) != len(leaves):
        raise ValueError(
            f"the program takes {len(names)} inputs ({', '.join(names)}) "
            f"but {len(leaves)} were given"
        )
    return dict(zip(names, leaves))


def read_signature_names(program: ExportedProgram) -> tuple[str, ...]:
    """User-input names of ``program``, decomposed or not, in flattening order."""
    from torch.export.graph_signature import InputKind

    return tuple(
        spec.arg.name
        for spec in program.graph_signature.input_specs
        if spec.kind == InputKind.USER_INPUT
    )
