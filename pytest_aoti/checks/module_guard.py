"""The caller's module never changes: every run works on a copy that shares its Parameters and
owns its buffers and attributes. A program that writes a Parameter is refused before any eager
call; hidden writes are caught by version counters; a changed Python attribute is named (export
froze it). The input sets of one search share one copy (:class:`ModuleCopies`), put back in
the state it was made with before each of them. A module ``copy.deepcopy`` cannot copy is
copied field by field (:mod:`.module_copy`), and the check's record says so."""

from __future__ import annotations

import copy
import enum
import operator
import types
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_aoti.checks.module_copy import copy_module
from pytest_aoti.compiling.graph_ops import written_arguments
from pytest_aoti.errors import AotiUsageError
from pytest_aoti.trees import clone_like, storage_extent

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram

_PLAIN = (int, float, bool, str, bytes, complex, tuple, type(None))
"""Attribute values torch.export reads as constants: a change to one is invisible to the engine."""


def eager_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``module`` that shares its Parameters and owns everything else; built field
    by field where ``copy.deepcopy`` cannot copy it (:func:`.module_copy.copy_module`)."""
    memo: dict[Any, Any] = {id(param): param for param in module.parameters()}
    try:
        return copy_module(module, memo)
    except Exception as error:  # a buffer that cannot be copied, even field by field
        raise AotiUsageError(
            f"the module cannot be copied ({type(error).__name__}: "
            f"{str(error).strip()[:160]}); pytest-aoti runs a copy of it so that your module "
            "never changes, and a copy owns every buffer: give a buffer that cannot be copied "
            "a __deepcopy__"
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


def changes_between(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[AttributeChange]:
    """What changed from ``before`` to ``after`` (two :func:`plain_attributes`)."""
    return [
        AttributeChange(path, old, value)
        for path, value in after.items()
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


class ModuleCopies:
    """The copies of one module that the input sets of one search run (values draws, generated
    shapes): eager's (:func:`eager_copy`) and, made on first need, a float64 one. Each is made
    once and put back in the state it was made with before every later use: its buffers'
    values, and every submodule's attributes and containers (``_buffers``, ``_modules``, hook
    dicts, lists) as they were. A copy holding what cannot be put back (an object of a class
    of its own, whose state a call may change in place unseen) is made again for every use,
    as :func:`eager_copy` is."""

    def __init__(self, module: torch.nn.Module) -> None:
        import torch

        self._eager = _ReusedCopy(lambda: eager_copy(module))
        self._float64 = _ReusedCopy(lambda: copy_module(module).to(torch.float64))

    def eager(self) -> FirstState:
        """Eager's copy in its first state."""
        return self._eager.take()

    def float64(self) -> torch.nn.Module:
        """The module in float64 (Parameters too, owned), in its first state."""
        return self._float64.take().module

    @property
    def copies_made(self) -> int:
        """Copies made so far (the rest of the uses were restored)."""
        return self._eager.made + self._float64.made


@dataclass(frozen=True)
class FirstState:
    """A copy in the state it was made with, and what its state was then, where known."""

    module: torch.nn.Module
    buffers: Mapping[str, torch.Tensor] | None = None
    """Every buffer's value (None: a new copy, whose buffers hold them)."""
    attributes: Mapping[str, Any] | None = None
    """Its :func:`plain_attributes` (None: a new copy, read them)."""


class _ReusedCopy:
    """One copy from ``make``, restored to its first state before each :meth:`take`."""

    def __init__(self, make: Callable[[], torch.nn.Module]) -> None:
        self._make = make
        self._copy: torch.nn.Module | None = None
        self._state: _ModuleState | None = None
        self._restorable = True
        self.made = 0

    def take(self) -> FirstState:
        if self._copy is not None and self._state is not None and self._state.restore():
            return FirstState(self._copy, self._state.buffers, self._state.attributes)
        self._copy = self._make()
        self.made += 1
        # a module that could not be put back once never can: no state is read again
        self._state = _ModuleState.of(self._copy) if self._restorable else None
        self._restorable = self._state is not None
        return FirstState(self._copy)


_IMMUTABLE = (
    int,
    float,
    bool,
    str,
    bytes,
    complex,
    type(None),
    range,
    slice,
    type,
    enum.Enum,
    types.FunctionType,
    types.BuiltinFunctionType,
)
"""Attribute values a call cannot change in place: the same object is the same value."""


class _ModuleState:
    """A module tree's state, to put back: per submodule its ``__dict__`` as it was (the
    same objects), the contents of its containers, and its own tensors' values."""

    def __init__(self) -> None:
        self._dicts: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self._containers: list[tuple[Any, Any]] = []
        self._tensors: list[tuple[torch.Tensor, torch.Tensor, tuple[Any, ...]]] = []
        self._seen: set[int] = set()
        self.buffers: dict[str, torch.Tensor] = {}
        """Each buffer's value in this state, by name."""
        self.attributes: dict[str, Any] = {}
        """The tree's :func:`plain_attributes` in this state."""

    @classmethod
    def of(cls, module: torch.nn.Module) -> _ModuleState | None:
        """``module``'s state; None where part of it cannot be put back."""
        import torch

        state = cls()
        modules = {id(sub) for sub in module.modules()}
        with torch.no_grad():
            for sub in module.modules():
                attributes = vars(sub)
                state._dicts.append((attributes, dict(attributes)))
                if not all(state._add(value, modules) for value in attributes.values()):
                    return None
            buffers = {id(tensor): saved for tensor, saved, _ in state._tensors}
            state.buffers = {name: buffers[id(b)] for name, b in module.named_buffers()}
        state.attributes = plain_attributes(module)  # the same objects once restored
        return state

    def _add(self, value: Any, modules: set[int], depth: int = 0) -> bool:
        """Record what ``value`` holds; False where a call could change it unseen."""
        import torch

        if isinstance(value, _IMMUTABLE) or isinstance(
            value, (torch.dtype, torch.device, torch.Size, torch.layout, torch.memory_format)
        ):
            return True
        if isinstance(value, torch.nn.Module):
            return id(value) in modules  # restored as a module of the tree
        if isinstance(value, torch.nn.Parameter):
            return True  # the caller's own, shared; a write to one is refused
        if isinstance(value, torch.Tensor):
            return self._add_tensor(value)
        if depth > 2 or type(value) not in (dict, list, set, tuple, frozenset, OrderedDict):
            return False
        if id(value) not in self._seen and not isinstance(value, (tuple, frozenset)):
            self._seen.add(id(value))
            self._containers.append((value, copy.copy(value)))
        items = value.items() if isinstance(value, dict) else ((item, None) for item in value)
        return all(
            self._add(key, modules, depth + 1) and self._add(item, modules, depth + 1)
            for key, item in items
        )

    def _add_tensor(self, tensor: torch.Tensor) -> bool:
        import torch

        if tensor.layout != torch.strided or tensor.is_quantized or tensor.requires_grad:
            return False
        if id(tensor) not in self._seen:
            self._seen.add(id(tensor))
            self._tensors.append((tensor, clone_like(tensor), _layout(tensor)))
        return True

    def restore(self) -> bool:
        """Put the state back; False where a tensor's layout moved (then it is not)."""
        import torch

        if any(_layout(tensor) != layout for tensor, _, layout in self._tensors):
            return False
        for attributes, as_made in self._dicts:
            if not _holds(attributes, as_made):
                attributes.clear()
                attributes.update(as_made)
        for container, items in self._containers:
            if (container or items) and not _holds(container, items):  # most are empty
                _refill(container, items)
        with torch.no_grad():
            for tensor, value, _ in self._tensors:
                extent = storage_extent(tensor)
                if extent:
                    offset = tensor.storage_offset()
                    into = tensor.as_strided((extent,), (1,), offset)
                    into.copy_(value.as_strided((extent,), (1,), offset))
        return True


def _holds(container: Any, saved: Any) -> bool:
    """Whether ``container`` holds the very items of ``saved``, in order (by identity: ``==``
    on tensors is elementwise)."""
    if len(container) != len(saved):
        return False
    if isinstance(container, dict):
        return list(container) == list(saved) and all(
            map(operator.is_, container.values(), saved.values())
        )
    if isinstance(container, list):
        return all(map(operator.is_, container, saved))
    return all(item in container for item in saved)  # a set: hashed by identity or value


def _refill(container: Any, saved: Any) -> None:
    """Give a list, set or dict back the items of ``saved`` (the same object stays)."""
    if isinstance(container, list):
        container[:] = saved
    else:
        container.clear()
        container.update(saved)


def _layout(tensor: torch.Tensor) -> tuple[Any, ...]:
    """What a call must leave as it is for a tensor's values to be put back by a copy."""
    return (
        tuple(tensor.shape),
        tensor.stride(),
        tensor.storage_offset(),
        tensor.dtype,
        tensor.device,
        tensor.untyped_storage().data_ptr(),
        tensor.requires_grad,
    )
