"""The caller's module never changes: every run works on a copy that shares its Parameters and
owns its buffers and attributes. A program that writes a Parameter is refused before any eager
call; hidden writes are caught by version counters; a changed Python attribute is named (export
froze it)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_aoti.compiling.graph_ops import written_arguments
from pytest_aoti.errors import AotiUsageError

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram

_PLAIN = (int, float, bool, str, bytes, complex, tuple, type(None))
"""Attribute values torch.export reads as constants: a change to one is invisible to the engine."""


def eager_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``module`` that shares its Parameters and owns everything else."""
    memo: dict[int, Any] = {id(param): param for param in module.parameters()}
    try:
        return copy.deepcopy(module, memo)
    except Exception as error:  # a module holding a lock, a file, a C++ object
        raise AotiUsageError(
            f"the module cannot be copied (copy.deepcopy raised {type(error).__name__}: "
            f"{str(error).strip()[:160]}); pytest-aoti runs a copy of it so that your module "
            "never changes: keep objects that cannot be copied out of the module, or give "
            "them a __deepcopy__"
        ) from None


def weight_versions(module: torch.nn.Module) -> dict[str, int]:
    """Each Parameter's version counter: it moves with every in-place write."""
    return {name: param._version for name, param in module.named_parameters()}


def assert_weights_unwritten(module: torch.nn.Module, before: Mapping[str, int]) -> None:
    """Raise the usage error of a Parameter written in place since ``before``."""
    written = [
        name
        for name, param in module.named_parameters()
        if name in before and param._version != before[name]
    ]
    if written:
        raise parameter_write_error(written)


def parameter_writes(exported: ExportedProgram) -> list[str]:
    """The Parameters ``exported`` writes in place (also in higher-order ops), by FQN."""
    parameters = exported.graph_signature.inputs_to_parameters
    placeholders = {
        node: parameters[node.name]
        for node in exported.graph.nodes
        if node.op == "placeholder" and node.name in parameters
    }
    written: list[str] = []
    _scan(exported.graph_module, placeholders, written)
    return written


def _scan(graph_module: Any, names: Mapping[Any, str], written: list[str]) -> None:
    """Add to ``written`` the names (by node, ``names``) that ``graph_module`` writes."""
    import torch

    for node in graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        for argument in written_arguments(node):
            name = names.get(argument)
            if name is not None and name not in written:
                written.append(name)
        # a higher-order op: the operands after its last subgraph are that graph's inputs
        subgraphs = [
            position
            for position, argument in enumerate(node.args)
            if getattr(argument, "op", None) == "get_attr"
            and isinstance(getattr(graph_module, argument.target, None), torch.fx.GraphModule)
        ]
        if not subgraphs:
            continue
        operands = torch.utils._pytree.tree_leaves(node.args[subgraphs[-1] + 1 :])
        for position in subgraphs:
            inner = getattr(graph_module, node.args[position].target)
            inputs = [n for n in inner.graph.nodes if n.op == "placeholder"]
            inner_names = {
                placeholder: names[operand]
                for placeholder, operand in zip(inputs, operands)
                if operand in names
            }
            if inner_names:
                _scan(inner, inner_names, written)


def parameter_write_error(names: list[str]) -> AotiUsageError:
    listed = ", ".join(f"'{name}'" for name in names)
    plural = "s" if len(names) > 1 else ""
    return AotiUsageError(
        f"forward writes Parameter{plural} {listed} in place: an AOTI engine cannot write a "
        "weight back (torch's loader fails on the extra output), and checking it would change "
        "your module's weights; keep state that changes in a registered buffer "
        "(self.register_buffer) or pass it as an input the program mutates"
    )


@dataclass(frozen=True)
class AttributeChange:
    """A Python attribute a forward changed: where, and its value before and after."""

    path: str
    """``self.calls``, ``self.block.seen``."""
    before: Any
    after: Any

    @property
    def added(self) -> bool:
        return self.before is _ABSENT


class _Absent:
    def __repr__(self) -> str:
        return "(unset)"


_ABSENT: Any = _Absent()


def plain_attributes(module: torch.nn.Module) -> dict[str, Any]:
    """Every plain-valued attribute (or unregistered tensor) of the module tree, by path."""
    import torch

    found: dict[str, Any] = {}
    for prefix, submodule in module.named_modules():
        owner = f"self.{prefix}." if prefix else "self."
        for name, value in vars(submodule).items():
            if name.startswith("_") or name == "training":
                continue
            if isinstance(value, _PLAIN) or (
                isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter)
            ):
                found[owner + name] = value
    return found


def attribute_changes(before: Mapping[str, Any], module: torch.nn.Module) -> list[AttributeChange]:
    """What a call changed of ``before`` (:func:`plain_attributes` taken before it)."""
    return [
        AttributeChange(path, old, value)
        for path, value in plain_attributes(module).items()
        if (old := before.get(path, _ABSENT)) is _ABSENT or not _same(old, value)
    ]


def _same(old: Any, new: Any) -> bool:
    import torch

    if old is new:
        return True
    if isinstance(old, torch.Tensor) or isinstance(new, torch.Tensor):
        return False  # a tensor attribute rebound: the engine keeps the exported one
    try:
        return bool(type(old) is type(new) and old == new)
    except Exception:  # a value without a usable ==
        return False


def describe_changes(changes: list[AttributeChange]) -> str:
    """``forward changes self.calls, a Python attribute: …``: what it means and what to do."""
    paths = ", ".join(change.path for change in changes[:3])
    if len(changes) > 3:
        paths += f" and {len(changes) - 3} more"
    plural = len(changes) > 1
    return (
        f"forward changes {paths}, {'Python attributes' if plural else 'a Python attribute'}: "
        f"torch.export froze {'their values' if plural else 'its value'} at export, so the "
        "engine never changes "
        f"{'them' if plural else 'it'}; keep state in a registered buffer"
    )
