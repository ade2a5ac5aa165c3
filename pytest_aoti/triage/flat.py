"""Flat copies of what a repro bundle saves, so that plain torch can load it.

A model whose inputs or outputs are library types (a transformers ``ModelOutput``, a
``DynamicCache``) exports to a program whose tree specs name those types: ``torch.export.load``
cannot read it back until the library has registered them with pytree again, which a fresh
``python`` does not do. The bundle saves the program with flat specs instead (a tuple of
leaves in, a tuple of leaves out: the graph itself is unchanged, it always worked on flat
leaves) and the eager results as flat lists, with the tree structure written beside them as
text for the reader.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch.utils._pytree as pytree

from pytest_aoti.api import ProgramCall

if TYPE_CHECKING:
    from torch.export import ExportedProgram


def flat_program(exported: ExportedProgram) -> ExportedProgram:
    """A shallow copy of ``exported`` that takes ``(*leaves)`` and returns a tuple of leaves.

    Only the root entry of the module call graph is changed (its in/out specs); the graph,
    its signature and the state are shared with ``exported``. The example inputs, which may
    hold library types, are dropped.
    """
    spec = exported.call_spec
    if spec.in_spec is None or spec.out_spec is None:
        return exported
    entries = list(exported.module_call_graph)
    root = entries[0]
    assert root.signature is not None, "the root entry of a module call graph has a signature"
    signature = dataclasses.replace(
        root.signature,
        in_spec=pytree.tree_structure((tuple(range(spec.in_spec.num_leaves)), {})),
        out_spec=pytree.tree_structure(tuple(range(spec.out_spec.num_leaves))),
    )
    flat = copy.copy(exported)
    flat._module_call_graph = [dataclasses.replace(root, signature=signature), *entries[1:]]
    flat._example_inputs = None
    return flat


def flat_inputs(
    exported: ExportedProgram, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> list[Any]:
    """The leaves of ``(args, kwargs)`` in the order of the program's inputs."""
    return ProgramCall(exported).flat(args, kwargs)


def flat_results(
    eager_results: Sequence[Any],
) -> tuple[list[tuple[list[Any], dict[str, Any]]], list[str]]:
    """Each call's ``(outputs, {name: input})`` with the outputs as a list of leaves, and the
    leaves' names as the check names them (``output``, ``output[0]``,
    ``output['last_hidden_state']``)."""
    flat: list[tuple[list[Any], dict[str, Any]]] = []
    names: list[str] = []
    for index, (outputs, inputs) in enumerate(eager_results):
        with_paths, _ = pytree.tree_flatten_with_path(outputs)
        if index == 0:
            names = ["output" + pytree.keystr(path) for path, _ in with_paths]
        flat.append(([leaf for _, leaf in with_paths], dict(inputs)))
    return flat, names


def tree_text(spec: Any) -> str:
    """A tree spec as one line of text (for ``check.json``): types and keys, no values."""
    return " ".join(str(spec).split())
