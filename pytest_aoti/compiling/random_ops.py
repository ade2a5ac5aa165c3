"""Random operations in an exported program, read from the exported graph (so the answer is the
same on a cache hit). An engine, eager and the float64 re-run draw different numbers: no
comparison of a random output means anything."""

from __future__ import annotations

import linecache
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_aoti.compiling.graph_ops import aten_op, is_seeded_random, schema_arguments
from pytest_aoti.frames import quoted_frames

if TYPE_CHECKING:
    from torch.export import ExportedProgram
    from torch.fx import Node


@dataclass(frozen=True)
class RandomOp:
    """One random operation of a program, and the user's line that called it."""

    op: str
    """``aten.bernoulli.p``, ``aten.dropout.default``."""
    node: str
    """The graph node's name."""
    source: str = ""
    """``model.py:12 in forward: return self.drop(x)``; empty when torch kept no trace."""

    def describe(self) -> str:
        return f"{self.op} (node {self.node})" + (f" at {self.source}" if self.source else "")


def random_ops(exported: ExportedProgram) -> list[RandomOp]:
    """Every random operation of ``exported``, in graph order (nested graphs included)."""
    return [
        _random_op(node)
        for module in exported.graph_module.modules()
        for node in getattr(module, "graph", _NoGraph).nodes
        if _is_random(node)
    ]


def random_outputs(exported: ExportedProgram) -> list[bool]:
    """Per user output of ``exported`` (flattened, in order): whether a random op feeds it."""
    from torch.export.graph_signature import OutputKind  # torch loads on first use

    tainted = _tainted(exported)
    output = next(node for node in exported.graph.nodes if node.op == "output")
    return [
        getattr(value, "name", None) in tainted
        for spec, value in zip(exported.graph_signature.output_specs, output.args[0])
        if spec.kind == OutputKind.USER_OUTPUT
    ]


def _is_random(node: Node) -> bool:
    """A call of a ``nondeterministic_seeded`` op that draws (not with train or dropout_p off)."""
    op = aten_op(node.target) if node.op == "call_function" else None
    if op is None or not is_seeded_random(op):
        return False
    for position, argument in enumerate(schema_arguments(op)):
        if argument.name not in ("train", "training", "dropout_p"):
            continue
        if position < len(node.args):
            value = node.args[position]
        elif argument.name in node.kwargs:
            value = node.kwargs[argument.name]
        elif argument.has_default_value():
            value = argument.default_value
        else:
            return True
        if isinstance(value, (bool, int, float)) and not value:
            return False  # switched off: deterministic
    return True


def _tainted(exported: ExportedProgram) -> set[str]:
    """Names of the top graph's nodes a random op (or a nested graph with one) feeds."""
    nested = {
        name
        for name, module in exported.graph_module.named_modules()
        if name and any(_is_random(node) for node in getattr(module, "graph", _NoGraph).nodes)
    }
    tainted: set[str] = set()
    for node in exported.graph.nodes:
        calls_nested = any(
            arg.op == "get_attr" and str(arg.target) in nested for arg in node.all_input_nodes
        )
        if (
            _is_random(node)
            or calls_nested
            or any(arg.name in tainted for arg in node.all_input_nodes)
        ):
            tainted.add(node.name)
    return tainted


class _NoGraph:
    nodes: tuple[Any, ...] = ()


def _random_op(node: Node) -> RandomOp:
    target = node.target
    op = f"aten.{target._schema.name.split('::')[-1]}.{target._overloadname}"  # type: ignore[union-attr]
    return RandomOp(op=op, node=node.name, source=user_line(node.meta.get("stack_trace") or ""))


def user_line(stack_trace: str) -> str:
    """The innermost user frame of ``stack_trace``: ``file.py:12 in forward: line``, or empty."""
    frames = quoted_frames(stack_trace)
    if not frames:
        return ""
    file, line, function = frames[-1]
    where = f"{os.path.basename(file)}:{line} in {function}"
    text = linecache.getline(file, line).strip()
    return f"{where}: {text}" if text else where
