"""Custom classes in a program's inputs and outputs. Each must be a pytree node that has a
serialized name (an AOTI package stores the structure of its inputs and outputs by it) and
keys (every leaf is compared and named by its path); one that lacks either fails a step later
with an error that does not say how to fix it. The one module that reads torch's pytree
registries (``SUPPORTED_NODES``, ``SUPPORTED_SERIALIZED_TYPES``)."""

from __future__ import annotations

import collections
import dataclasses
import re
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch.utils._pytree import TreeSpec

_CONTAINERS = frozenset({"builtins", "collections"})
"""Modules of the containers torch registers itself (tuple, list, dict, OrderedDict, ...)."""


def serialized_name(cls: type) -> str:
    """The name a class is best registered under: its module and qualified name."""
    return f"{cls.__module__}.{cls.__qualname__}"


def registration_call(cls: type) -> str:
    """The one call that makes ``cls`` work in inputs and outputs from export to engine."""
    name, quoted = cls.__qualname__, f'"{serialized_name(cls)}"'
    if dataclasses.is_dataclass(cls):
        return f"torch.export.register_dataclass({name}, serialized_type_name={quoted})"
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return f"torch.utils._pytree._register_namedtuple({name}, serialized_type_name={quoted})"
    return (
        f"torch.utils._pytree.register_pytree_node({name}, flatten_fn, unflatten_fn, "
        f"serialized_type_name={quoted}, flatten_with_keys_fn=flatten_with_keys_fn)"
    )


def named_registration_call(path: str) -> str:
    """:func:`registration_call` for the class torch names as ``path`` (``module.QualName``);
    where the class cannot be found (one defined in a function), the call for a dataclass and
    the call for any other class."""
    cls = _find_class(path)
    if cls is not None:
        return registration_call(cls)
    name, quoted = path.rsplit(".", 1)[-1], f'"{path}"'
    return (
        f"torch.export.register_dataclass({name}, serialized_type_name={quoted}) for a "
        f"dataclass, else torch.utils._pytree.register_pytree_node({name}, flatten_fn, "
        f"unflatten_fn, serialized_type_name={quoted}, flatten_with_keys_fn=flatten_with_keys_fn)"
    )


def _find_class(path: str) -> type | None:
    """The class ``module.QualName`` among the imported modules, or None."""
    parts = path.split(".")
    for split in range(len(parts) - 1, 0, -1):
        found: Any = sys.modules.get(".".join(parts[:split]))
        for attribute in parts[split:]:
            found = getattr(found, attribute, None)
        if isinstance(found, type):
            return found
    return None


_CLASS = re.compile(r"<class '(?P<cls>[\w.<>]+)'>")
_SERIALIZATION = re.compile(
    r"No registered serialization name for <class|Serializing <class '[^']+'> in pytree is "
    r"not registered|Can't serialize TreeSpec of namedtuple class"
)


def serialization_hint(text: str) -> str | None:
    """The hint for torch's failure to store a tree's structure in a package; None otherwise."""
    if not _SERIALIZATION.search(text):
        return None
    match = _CLASS.search(text)
    call = named_registration_call(match["cls"]) if match else "register the class"
    return (
        "What to try: the program exported and decomposed, but the AOTI package cannot store "
        "the structure of its inputs or outputs: a custom class in them has no serialized "
        f"name. Register it once with one, before exporting: {call}."
    )


def _node_classes(spec: TreeSpec) -> Iterator[type]:
    """The class of every node of ``spec`` that is not a leaf, outermost first."""
    if spec.is_leaf():
        return
    node_type = spec.type
    # a namedtuple's node is pytree's generic one; its class is the context
    yield spec.context if node_type is collections.namedtuple else node_type
    for child in spec.children():
        yield from _node_classes(child)


def leaf_parents(spec: TreeSpec) -> list[type | None]:
    """Per leaf of ``spec``, in order, the class of the node that holds it (None at the root)."""
    parents: list[type | None] = []

    def walk(node: TreeSpec, parent: type | None) -> None:
        if node.is_leaf():
            parents.append(parent)
            return
        holder = node.context if node.type is collections.namedtuple else node.type
        for child in node.children():
            walk(child, holder)

    walk(spec, None)
    return parents


def is_custom(cls: type | None) -> bool:
    """Whether ``cls`` is a class of the user's or a library's, not a container of Python's."""
    return cls is not None and cls.__module__ not in _CONTAINERS


def missing_registration(cls: type) -> list[str]:
    """What the pytree registration of ``cls`` lacks for an AOTI check; empty if nothing."""
    import torch.utils._pytree as pytree

    missing = []
    node = pytree.SUPPORTED_NODES.get(cls)
    if node is not None and node.flatten_with_keys_fn is None:
        missing.append("a flatten_with_keys_fn (each leaf is compared and named by its path)")
    serialized = pytree.SUPPORTED_SERIALIZED_TYPES.get(cls)
    if (
        serialized is None
        or serialized.serialized_type_name == pytree.NO_SERIALIZED_TYPE_NAME_FOUND
    ):
        missing.append(
            "a serialized_type_name (the AOTI package stores the tree's structure by it)"
        )
    return missing


def unfit_classes(spec: TreeSpec) -> list[tuple[type, list[str]]]:
    """Each custom class in ``spec`` whose registration lacks something, with what it lacks."""
    found: dict[type, list[str]] = {}
    for cls in _node_classes(spec):
        if cls not in found:
            found[cls] = missing_registration(cls)
    return [(cls, missing) for cls, missing in found.items() if missing]


def unfit_class_message(cls: type, missing: list[str], where: str) -> list[str]:
    """The first line and the hint for ``cls`` found in ``where`` lacking ``missing``."""
    import torch.utils._pytree as pytree

    lacks = " and without ".join(missing)
    if cls.__module__ == "torch.return_types":
        first = (
            f"{serialized_name(cls)} in {where} is a result class torch registers without {lacks}"
        )
        fix = "return a plain tuple in its place: tuple(result)"
    elif cls not in pytree.SUPPORTED_NODES:  # a namedtuple: a node without a registration
        first = f"{serialized_name(cls)} in {where} is a namedtuple, a pytree node without {lacks}"
        fix = f"register it before exporting with {registration_call(cls)}"
    else:
        first = f"{serialized_name(cls)} in {where} is a pytree node registered without {lacks}"
        fix = (
            f"register it once, in place of the registration it has, with {registration_call(cls)}"
        )
    return [first, f"  What to try: {fix}"]


def check_input_classes(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Raise ``AotiUsageError`` for a custom class in the inputs whose registration lacks keys
    or a serialized name, before anything is exported."""
    __tracebackhide__ = True
    import torch.utils._pytree as pytree

    from pytest_aoti.errors import AotiUsageError

    _, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    for cls, missing in unfit_classes(spec):
        raise AotiUsageError("\n".join(unfit_class_message(cls, missing, "the inputs")))


def check_program_classes(in_spec: TreeSpec | None, out_spec: TreeSpec | None) -> None:
    """Raise ``AotiExportError`` for a custom class in an exported program's inputs or outputs
    whose registration lacks keys or a serialized name: the compile (or the comparison) would
    stop on it with torch's error."""
    from pytest_aoti.errors import AotiExportError

    for spec, where in ((out_spec, "the outputs"), (in_spec, "the inputs")):
        if spec is None:
            continue
        for cls, missing in unfit_classes(spec):
            lines = unfit_class_message(cls, missing, where)
            raise AotiExportError(f"torch.export.export failed: {lines[0]}\n{lines[1]}")
