"""What a graph node calls, asked of torch's op classes in one place.

torch's op classes (``torch._ops.OpOverload``, ``torch._ops.HigherOrderOperator``) and an
op's schema are private: the random-op scan, the instrumented graph of node localization and
its control-flow refusal ask every question about a node's target here, so a torch release
that moves them is fixed in this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch._ops import OpOverload


def aten_op(target: Any) -> OpOverload | None:
    """The operator overload a ``call_function`` node calls (``aten.mul.Tensor``), or None
    for anything else (a Python function, ``operator.getitem``, a higher-order op)."""
    import torch

    return target if isinstance(target, torch._ops.OpOverload) else None


def is_view_op(target: Any) -> bool:
    """Whether the node's op returns a view of an input (``aten.view``, ``aten.slice``)."""
    op = aten_op(target)
    return op is not None and bool(op.is_view)


def is_seeded_random(op: OpOverload) -> bool:
    """Whether torch tags the op ``nondeterministic_seeded`` (it draws from the generator)."""
    import torch

    return torch.Tag.nondeterministic_seeded in op.tags


def schema_arguments(op: OpOverload) -> Sequence[Any]:
    """The op's declared arguments, in order: each with ``name``, ``has_default_value()``
    and ``default_value``."""
    return op._schema.arguments


def control_flow_name(target: Any) -> str | None:
    """``cond``, ``while_loop``, ``map_impl``: the name of a higher-order op (a call into
    nested graphs), or None for an ordinary op."""
    import torch

    if not isinstance(target, torch._ops.HigherOrderOperator):
        return None
    return str(getattr(target, "__name__", target))


def op_name(target: Any) -> str:
    """``aten.mul.Tensor`` for an operator overload, else the callable's name."""
    op = aten_op(target)
    if op is not None:
        return str(op)
    return str(getattr(target, "__name__", target))


def first_call_of(graph: Any, names: Iterable[str]) -> str | None:
    """The first op of ``graph`` named in ``names``, by its packet (``topk``) or its
    overload (``max.dim``); None where the graph calls none of them."""
    wanted = frozenset(names)
    for node in graph.nodes:
        op = aten_op(node.target) if node.op == "call_function" else None
        if op is None:
            continue
        packet = op._opname
        if packet in wanted or f"{packet}.{op._overloadname}" in wanted:
            return packet
    return None
