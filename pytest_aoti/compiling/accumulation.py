"""How many terms each result of a program accumulates: the float rounding the fp64 rule
(:func:`pytest_aoti.tolerance.fp64_rescue`) allows it. Per output, mutated input and mutated
buffer: the longest chain of accumulations (a reduction's length, a matmul's or convolution's
inner size, softmax's dim) from the inputs; elementwise results accumulate nothing."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_aoti.compiling.graph_ops import aten_op, written_arguments

if TYPE_CHECKING:
    from torch.export import ExportedProgram

_REDUCTIONS = frozenset(
    "sum mean nansum nanmean prod var std var_mean std_mean norm linalg_vector_norm "
    "logsumexp".split()
)
"""Reductions: they accumulate the input's elements per output element."""

_ALONG_DIM = frozenset(
    {"softmax", "_softmax", "log_softmax", "_log_softmax", "cumsum", "cumprod", "logcumsumexp"}
)
"""Ops that accumulate along one dim (their second argument)."""

_INNER_PRODUCTS = {
    **dict.fromkeys(("mm", "bmm", "matmul", "dot", "vdot", "mv", "linear"), 0),
    **dict.fromkeys(("addmm", "addmv", "baddbmm", "addbmm"), 1),
}
"""Inner products: the argument whose last dim is the inner size."""

_CONVOLUTIONS = frozenset(
    "convolution _convolution conv1d conv2d conv3d "
    "conv_transpose1d conv_transpose2d conv_transpose3d".split()
)

_NORMALIZATIONS = frozenset(
    {"layer_norm", "native_layer_norm", "group_norm", "native_group_norm", "rms_norm"}
)

_ATTENTION = frozenset(
    "scaled_dot_product_attention _scaled_dot_product_flash_attention_for_cpu "
    "_scaled_dot_product_flash_attention _scaled_dot_product_efficient_attention".split()
)


@dataclass(frozen=True)
class Accumulation:
    """Terms accumulated per output (flattening order), mutated input and mutated buffer."""

    outputs: tuple[int, ...] = ()
    inputs: Mapping[str, int] = field(default_factory=dict)
    buffers: Mapping[str, int] = field(default_factory=dict)


def accumulation(exported: ExportedProgram) -> Accumulation:
    """What each result of ``exported`` accumulates (see the module's docstring)."""
    lengths: dict[Any, int] = {}
    for node in exported.graph.nodes:
        if node.op != "call_function":
            continue
        before = max((lengths.get(arg, 0) for arg in _tensor_args(node)), default=0)
        lengths[node] = before + _own_length(node, exported)
    nodes = {node.name: node for node in exported.graph.nodes}
    signature = exported.graph_signature
    outputs = []
    for spec in signature.output_specs:
        if spec.kind.name == "USER_OUTPUT":
            outputs.append(lengths.get(nodes.get(getattr(spec.arg, "name", "")), 0))
    written: dict[str, int] = {}
    for node, length in lengths.items():
        for target in written_arguments(node):
            name = getattr(target, "name", "")
            written[name] = max(written.get(name, 0), length)
    # a mutation the decomposed program returns as an output
    for spec in signature.output_specs:
        if spec.kind.name in ("USER_INPUT_MUTATION", "BUFFER_MUTATION") and spec.target:
            node = nodes.get(getattr(spec.arg, "name", ""))
            written[spec.target] = max(written.get(spec.target, 0), lengths.get(node, 0))
    inputs = {name: written.get(name, 0) for name in signature.user_inputs if name in written}
    buffers = {
        fqn: written.get(placeholder, written.get(fqn, 0))
        for placeholder, fqn in signature.inputs_to_buffers.items()
        if placeholder in written or fqn in written
    }
    return Accumulation(tuple(outputs), inputs, buffers)


def _tensor_args(node: Any) -> list[Any]:
    import torch

    found: list[Any] = []
    for arg in [*node.args, *node.kwargs.values()]:
        for leaf in arg if isinstance(arg, (list, tuple)) else [arg]:
            if isinstance(leaf, torch.fx.Node):
                found.append(leaf)
    return found


def _own_length(node: Any, exported: ExportedProgram) -> int:
    """The terms one element of ``node``'s result accumulates by the node's own op."""
    op = aten_op(node.target)
    if op is None:
        return _subgraph_length(node, exported)
    name = op._schema.name.split("::")[-1]
    args = node.args
    if name in _REDUCTIONS:
        return max(1, _numel(args[0]) // max(1, _numel(node)))
    if name in _ALONG_DIM and len(args) > 1 and isinstance(args[1], int):
        return _size(args[0], args[1])
    if name in _INNER_PRODUCTS and len(args) > _INNER_PRODUCTS[name]:
        return _size(args[_INNER_PRODUCTS[name]], -1)
    if name in _CONVOLUTIONS and len(args) > 1:
        weight = _shape(args[1])
        return _product(weight[1:]) if weight else 0
    if name in _NORMALIZATIONS and len(args) > 1:
        return _product(args[1]) if isinstance(args[1], (list, tuple)) else _size(args[0], -1)
    if name in _ATTENTION and len(args) > 1:
        return _size(args[0], -1) + _size(args[1], -2)
    return 0


def _subgraph_length(node: Any, exported: ExportedProgram) -> int:
    """A higher-order op's nested graphs: the longest accumulation inside them."""
    import torch

    longest = 0
    for arg in node.args:
        if getattr(arg, "op", None) != "get_attr":
            continue
        inner = getattr(exported.graph_module, arg.target, None)
        if not isinstance(inner, torch.fx.GraphModule):
            continue
        for inner_node in inner.graph.nodes:
            if inner_node.op == "call_function" and aten_op(inner_node.target) is not None:
                longest = max(longest, _own_length(inner_node, exported))
    return longest


def _shape(node: Any) -> tuple[int, ...]:
    import torch

    value = getattr(node, "meta", {}).get("val")
    if not isinstance(value, torch.Tensor):
        return ()
    return tuple(_hint(size) for size in value.shape)


def _size(node: Any, dim: int) -> int:
    try:
        return _shape(node)[dim]
    except IndexError:
        return 0


def _numel(node: Any) -> int:
    return _product(_shape(node))


def _product(sizes: Any) -> int:
    return math.prod(_hint(size) for size in sizes)


def _hint(size: Any) -> int:
    """A size as an int by its example hint, without a guard; 1 where unknown."""
    if isinstance(size, int):
        return size
    hint = getattr(getattr(size, "node", None), "hint", None)
    return int(hint) if isinstance(hint, int) else 1
