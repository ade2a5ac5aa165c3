"""Pytrees of tensors: the one clone every check, triage step and bundle uses, and their size. A
clone keeps sizes, strides and storage offset: the engine was compiled for them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def clone_tree(tree: Any) -> Any:
    """Clone every tensor of a pytree (:func:`clone_like`), rebuilding containers."""
    import torch
    import torch.utils._pytree as pytree

    return pytree.tree_map(
        lambda leaf: clone_like(leaf) if isinstance(leaf, torch.Tensor) else leaf, tree
    )


def clone_like(tensor: torch.Tensor) -> torch.Tensor:
    """A detached copy with ``tensor``'s sizes, strides and storage offset (memory copied as it
    lies), so a view keeps its layout and an expanded tensor stays expanded."""
    import torch

    plain = tensor.detach()
    if plain.layout != torch.strided or plain.is_conj() or plain.is_neg():
        return plain.clone()  # intake refuses other layouts; lazy bits are materialized
    offset, extent = plain.storage_offset(), storage_extent(plain)
    copy = empty_like_layout(plain)
    if extent:
        copy.as_strided((extent,), (1,), offset).copy_(plain.as_strided((extent,), (1,), offset))
    return copy


def empty_like_layout(example: torch.Tensor) -> torch.Tensor:
    """An uninitialized tensor like ``example`` in storage of its own (not a view)."""
    return empty_with_layout(
        tuple(example.size()),
        tuple(example.stride()),
        int(example.storage_offset()),
        example.dtype,
        example.device,
    )


def empty_with_layout(
    size: tuple[int, ...],
    stride: tuple[int, ...],
    offset: int,
    dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor:
    """An uninitialized tensor of this layout in storage of its own (not a view)."""
    import torch

    extent = 0 if 0 in size else 1 + sum((n - 1) * s for n, s in zip(size, stride))
    storage = torch.empty((offset + extent,), dtype=dtype, device=device).untyped_storage()
    return torch.empty((0,), dtype=dtype, device=device).set_(storage, offset, size, stride)


def storage_extent(tensor: torch.Tensor) -> int:
    """Elements of storage ``tensor`` spans from its offset: one past its last element."""
    if tensor.numel() == 0:
        return 0
    return 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))


def distinct_shape(tensor: torch.Tensor) -> tuple[int, ...]:
    """``tensor``'s shape with every stride-0 (expanded) dim of size 1."""
    return tuple(1 if stride == 0 else size for size, stride in zip(tensor.shape, tensor.stride()))


def has_own_elements(tensor: torch.Tensor) -> bool:
    """Whether elements outside expanded dims have memory of their own (not ``unfold``'s)."""
    return not _overlaps(distinct_shape(tensor), tensor.stride())


def laid_out_like(values: torch.Tensor, example: torch.Tensor) -> torch.Tensor | None:
    """``values`` laid out like ``example``; None where its elements overlap (not expanded)."""
    if not has_own_elements(example):
        return None
    laid_out = empty_like_layout(example)
    own = laid_out.as_strided(distinct_shape(example), example.stride(), example.storage_offset())
    own.copy_(values)
    return laid_out


def _overlaps(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    if 0 in shape:
        return False
    spanned = 0
    for size, stride in sorted(
        ((size, stride) for size, stride in zip(shape, strides) if size > 1),
        key=lambda pair: pair[1],
    ):
        if stride <= spanned:
            return True
        spanned += (size - 1) * stride
    return False


def tensor_bytes(tree: Any) -> int:
    """The bytes of every tensor of a pytree."""
    import torch
    import torch.utils._pytree as pytree

    return sum(
        leaf.numel() * leaf.element_size()
        for leaf in pytree.tree_leaves(tree)
        if isinstance(leaf, torch.Tensor)
    )
