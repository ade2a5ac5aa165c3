"""Pytrees of tensors: the one clone every check, triage step and bundle uses, and their size. A
clone keeps sizes, strides and storage offset: the engine was compiled for them. The same
values in another memory layout (channels_last, permuted) for the ``layouts`` option and the
probes."""

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


LAYOUTS: dict[str, str] = {
    "channels_last": "4-D",
    "channels_last_3d": "5-D",
    "permuted": "2-D and up",
}
"""The memory layouts an input can be relaid in, by name, with the tensors each applies to."""


def relaid(tensor: torch.Tensor, layout: str) -> torch.Tensor | None:
    """``tensor``'s values in memory layout ``layout`` (:data:`LAYOUTS`): ``channels_last``
    for 4-D, ``channels_last_3d`` for 5-D, ``permuted`` (the last two dims' strides swapped)
    for 2-D and up; None where the layout does not apply to it."""
    import torch

    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}: use {', '.join(LAYOUTS)}")
    if tensor.layout != torch.strided:
        return None
    if layout == "channels_last" and tensor.dim() == 4:
        return tensor.contiguous(memory_format=torch.channels_last)
    if layout == "channels_last_3d" and tensor.dim() == 5:
        return tensor.contiguous(memory_format=torch.channels_last_3d)
    if layout == "permuted" and tensor.dim() >= 2:
        return tensor.transpose(-1, -2).contiguous().transpose(-1, -2)
    return None


def relaid_tree(tree: Any, layout: str) -> tuple[Any, bool]:
    """A pytree with every tensor :func:`relaid` in ``layout`` (other leaves, and tensors it
    does not apply to, as they are), and whether that changed the layout of any tensor."""
    import torch
    import torch.utils._pytree as pytree

    changed = False

    def relay(leaf: Any) -> Any:
        nonlocal changed
        if not isinstance(leaf, torch.Tensor):
            return leaf
        made = relaid(leaf.detach(), layout)
        if made is None or not _other_strides(leaf, made):
            return leaf  # its own layout kept: the same program reads it alike
        changed = True
        return made.requires_grad_() if leaf.requires_grad else made

    return pytree.tree_map(relay, tree), changed


def _other_strides(tensor: torch.Tensor, other: torch.Tensor) -> bool:
    """Whether the strides differ on a dim of more than one element (a size-1 dim's stride
    never moves an element)."""
    return any(
        size > 1 and mine != theirs
        for size, mine, theirs in zip(tensor.shape, tensor.stride(), other.stride())
    )
