"""What a graph node calls, asked of torch's private op classes in one place, so a torch release
that moves them is fixed here."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch._ops import OpOverload


def aten_op(target: Any) -> OpOverload | None:
    """The ``OpOverload`` a ``call_function`` node calls, or None."""
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
    """The op's declared arguments (``name``, ``has_default_value()``, ``default_value``)."""
    return op._schema.arguments


def control_flow_name(target: Any) -> str | None:
    """The name of a higher-order op (``cond``, ``while_loop``, ``map_impl``), or None."""
    import torch

    if not isinstance(target, torch._ops.HigherOrderOperator):
        return None
    return str(getattr(target, "__name__", target))


def op_name(target: Any) -> str:
    """``aten.mul.Tensor`` for an operator overload, else the callable's name."""
    op = aten_op(target)
    return str(op) if op is not None else str(getattr(target, "__name__", target))


def first_call_of(graph: Any, names: Iterable[str]) -> str | None:
    """The first op of ``graph`` named in ``names`` (``topk`` or ``max.dim``), else None."""
    wanted = frozenset(names)
    for node in graph.nodes:
        op = aten_op(node.target) if node.op == "call_function" else None
        if op is None:
            continue
        packet = op._opname
        if packet in wanted or f"{packet}.{op._overloadname}" in wanted:
            return packet
    return None


def written_arguments(node: Any) -> list[Any]:
    """The graph nodes a node's op writes in place (``self`` of ``aten.add_``, ``out=``)."""
    op = aten_op(node.target)
    if op is None:
        return []
    written: list[Any] = []
    for position, argument in enumerate(schema_arguments(op)):
        alias = argument.alias_info
        if alias is None or not alias.is_write:
            continue
        value = node.args[position] if position < len(node.args) else node.kwargs.get(argument.name)
        written.extend(value if isinstance(value, (list, tuple)) else [value])
    return [value for value in written if value is not None]


_SCALAR_READS = ("item", "_local_scalar_dense")
"""Ops that turn a one-element tensor into a Python number (``.item()``)."""


def scalar_output_dtypes(exported: Any) -> list[Any]:
    """Per user output: a float's ``.item()`` source dtype (the least precise), else None."""
    import torch

    nodes = {node.name: node for node in exported.graph.nodes}
    found: list[Any] = []
    for spec in exported.graph_signature.output_specs:
        if spec.kind.name != "USER_OUTPUT":
            continue
        node = nodes.get(getattr(spec.arg, "name", ""))
        value = None if node is None else node.meta.get("val")
        if node is None or not isinstance(value, (float, torch.SymFloat)):
            found.append(None)
            continue
        dtypes = _read_dtypes(node)
        found.append(max(dtypes, key=lambda d: torch.finfo(d).eps) if dtypes else None)
    return found


def _read_dtypes(node: Any) -> list[Any]:
    """The floating dtypes of the tensors ``.item()`` read to make the scalar ``node``."""
    import torch

    dtypes: list[Any] = []
    pending, seen = [node], set()
    while pending:
        current = pending.pop()
        if current in seen or getattr(current, "op", None) != "call_function":
            continue
        seen.add(current)
        op = aten_op(current.target)
        if op is not None and op._schema.name.split("::")[-1] in _SCALAR_READS:
            value = current.args[0].meta.get("val")
            if isinstance(value, torch.Tensor) and value.dtype.is_floating_point:
                dtypes.append(value.dtype)
            continue
        pending += [arg for arg in current.args if isinstance(arg, torch.fx.Node)]
    return dtypes


@dataclass(frozen=True)
class NodeTarget:
    """What a graph node calls (``node.target``), as a check asks about it:
    ``NodeTarget(node.target).aten``."""

    target: Any

    @property
    def aten(self) -> OpOverload | None:
        """The ``OpOverload`` it is, or None (a higher-order op, ``operator.getitem``)."""
        return aten_op(self.target)

    @property
    def name(self) -> str:
        """``aten.mul.Tensor`` for an operator overload, else the callable's name."""
        return op_name(self.target)

    @property
    def is_view(self) -> bool:
        """Whether it returns a view of an input (``aten.view``, ``aten.slice``)."""
        return is_view_op(self.target)

    @property
    def control_flow(self) -> str | None:
        """The name of a higher-order op (``cond``, ``while_loop``, ``map_impl``), or None."""
        return control_flow_name(self.target)

    @property
    def arguments(self) -> Sequence[Any]:
        """An operator overload's declared arguments (``name``, ``has_default_value()``,
        ``default_value``); none for anything else."""
        op = aten_op(self.target)
        return schema_arguments(op) if op is not None else ()

    @staticmethod
    def first_call_in(graph: Any, names: Iterable[str]) -> str | None:
        """The first op of ``graph`` named in ``names`` (``topk`` or ``max.dim``), else None."""
        return first_call_of(graph, names)
