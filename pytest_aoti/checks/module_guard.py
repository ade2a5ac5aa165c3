"""The caller's module never changes: every run works on a copy that shares its weights.

Eager runs (and torch.export traces) a copy of the module whose Parameters are the
caller's own tensors (no second copy of the weights) and whose registered buffers and
Python attributes are its own. A program that writes a Parameter in place is refused before
any eager call (:func:`parameter_writes`), so shared weights are never written; a write
the program does not show is caught by the Parameters' version counters. A forward that
changes a Python attribute (``self.calls += 1``) is named: torch.export froze the
attribute's value, so the engine never changes it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_aoti.errors import AotiUsageError

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram

_PLAIN = (int, float, bool, str, bytes, complex, tuple, type(None))
"""Attribute values that torch.export reads as constants: a change to one is invisible to
the engine."""


def eager_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``module`` that shares its Parameters and owns everything else (buffers,
    Python attributes, submodules): what any eager call or export runs."""
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
    """The Parameters ``exported`` (the training-IR program) writes in place, by FQN: in
    its graph and in the graphs its higher-order ops call (``torch.no_grad()`` blocks)."""
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

    from pytest_aoti.compiling.graph_ops import written_arguments

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
    """Every Python attribute of ``module`` and its submodules that holds a plain value
    (number, bool, string, tuple, None) or a tensor that is not registered, by path."""
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
    after = plain_attributes(module)
    changes = []
    for path, value in after.items():
        old = before.get(path, _ABSENT)
        if old is not _ABSENT and _same(old, value):
            continue
        changes.append(AttributeChange(path, old, value))
    return changes


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
