"""Pytrees of tensors: the one clone every check, triage step and bundle uses, and their size."""

from __future__ import annotations

from typing import Any


def clone_tree(tree: Any) -> Any:
    """Clone every tensor of a pytree (detached), keeping everything else as is.

    Containers are rebuilt, so the result shares neither tensors nor lists with ``tree``.
    """
    import torch
    import torch.utils._pytree as pytree

    return pytree.tree_map(
        lambda leaf: leaf.detach().clone() if isinstance(leaf, torch.Tensor) else leaf, tree
    )


def tensor_bytes(tree: Any) -> int:
    """The bytes of every tensor of a pytree."""
    import torch
    import torch.utils._pytree as pytree

    return sum(
        leaf.numel() * leaf.element_size()
        for leaf in pytree.tree_leaves(tree)
        if isinstance(leaf, torch.Tensor)
    )
