"""Inferring a ``torch.export`` ``dynamic_shapes`` spec from input samples of different sizes."""

from __future__ import annotations

import inspect
import itertools
import keyword
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.export import Dim

from pytest_aoti.errors import AotiUsageError

Sample = tuple[tuple[Any, ...], dict[str, Any]]

# Export assumes a dynamic size is neither 0 nor 1: with ``min=1`` a program would accept
# size 1 without having traced its path (broadcasting, ``if n == 1``). As ``Dim.AUTO``.
MIN_DYNAMIC_SIZE = 2


@dataclass(frozen=True)
class _Axis:
    leaf: int
    axis: int


@dataclass
class _Cluster:
    """Dynamic axes tied to one root: ``size = scale * root + offset`` in every sample."""

    root: tuple[int, ...]
    members: list[tuple[_Axis, int, int]]  # (axis, scale, offset)


def infer_dynamic_shapes(
    module: torch.nn.Module, samples: Sequence[Sample], *, max_size: int | None = None
) -> Any:
    """Infer a ``torch.export`` ``dynamic_shapes`` spec from two or more ``(args, kwargs)`` samples.
    An axis whose size changes is dynamic; axes equal in every sample share one ``Dim``; an axis
    ``k`` times or ``c`` more than another becomes ``k * d`` or ``d + c``; unchanged axes are
    ``Dim.STATIC``, non-tensor leaves ``None``. Dims get ``min=2`` and no maximum unless
    ``max_size``; an axis 0 or 1 in some sample (and those tied to it) gets ``Dim.AUTO``. The spec
    is a tuple like ``args``, or a dict by ``forward``'s parameter names where a sample has kwargs."""
    if len(samples) < 2:
        raise AotiUsageError(
            f"infer_dynamic_shapes needs at least 2 samples of different sizes, got {len(samples)}"
        )
    signature = inspect.signature(module.forward)
    split = [_split_sample(sample, index) for index, sample in enumerate(samples)]
    keyed = any(kwargs for _, kwargs in split)
    bound = [_bind_sample(signature, sample, index) for index, sample in enumerate(split)]
    trees = bound if keyed else [args for args, _ in split]
    names = _leaf_names(bound[0])
    leaves, treespec = _flatten_samples(trees)
    _check_leaves(names, leaves)
    dims = _make_dims(_cluster_axes(_axis_sizes(leaves)), names, max_size)
    leaf_specs = [
        {axis: dims.get(_Axis(index, axis), torch.export.Dim.STATIC) for axis in range(leaf.dim())}
        if isinstance(leaf, torch.Tensor)
        else None
        for index, leaf in enumerate(leaves[0])
    ]
    return pytree.tree_unflatten(leaf_specs, treespec)


def _split_sample(sample: Any, index: int) -> Sample:
    if (
        not isinstance(sample, (tuple, list))
        or len(sample) != 2
        or not isinstance(sample[0], (tuple, list))
        or not isinstance(sample[1], Mapping)
    ):
        raise AotiUsageError(f"sample {index} must be a pair (args tuple, kwargs dict)")
    return tuple(sample[0]), dict(sample[1])


def _bind_sample(signature: inspect.Signature, sample: Sample, index: int) -> dict[str, Any]:
    args, kwargs = sample
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as error:
        raise AotiUsageError(f"sample {index} does not fit forward{signature}: {error}") from None
    return dict(bound.arguments)


def _leaf_names(arguments: dict[str, Any]) -> list[str]:
    """Leaf names as torch.export gives user inputs: ``x``, ``xs_0``, ``d_key``."""
    paths_and_leaves, _ = pytree.tree_flatten_with_path(arguments)
    return _unique([_path_name(path) for path, _ in paths_and_leaves])


def _flatten_samples(trees: list[Any]) -> tuple[list[list[Any]], Any]:
    first, treespec = pytree.tree_flatten(trees[0])
    leaves = [first]
    for index, tree in enumerate(trees[1:], start=1):
        other_leaves, other_spec = pytree.tree_flatten(tree)
        if other_spec != treespec:
            raise AotiUsageError(
                f"sample {index} has a different input structure (nesting, keys or number "
                "of inputs) than sample 0"
            )
        leaves.append(other_leaves)
    return leaves, treespec


def _path_name(path: Sequence[Any]) -> str:
    parts = []
    for entry in path:
        for attribute in ("key", "idx", "name"):
            if hasattr(entry, attribute):
                parts.append(str(getattr(entry, attribute)))
                break
        else:
            parts.append(str(entry))
    name = re.sub(r"\W", "_", "_".join(parts)) or "input"
    return f"_{name}" if name[0].isdigit() else name


def _unique(names: list[str]) -> list[str]:
    seen: set[str] = set()
    return [_fresh(name, seen) for name in names]


def _fresh(base: str, used: set[str]) -> str:
    """``base``, else ``base_2``, ``base_3``...: the first not ``used``, which it then joins."""
    name = base
    for suffix in itertools.count(2):
        if name not in used:
            break
        name = f"{base}_{suffix}"
    used.add(name)
    return name


def _check_leaves(names: list[str], leaves: list[list[Any]]) -> None:
    first = leaves[0]
    for index, sample in enumerate(leaves[1:], start=1):
        for name, reference, leaf in zip(names, first, sample):
            if isinstance(reference, torch.Tensor) != isinstance(leaf, torch.Tensor):
                raise AotiUsageError(
                    f"input '{name}' is a {type(reference).__name__} in sample 0 "
                    f"but a {type(leaf).__name__} in sample {index}"
                )
            if not isinstance(leaf, torch.Tensor):
                continue
            if leaf.dim() != reference.dim():
                raise AotiUsageError(
                    f"input '{name}' has rank {leaf.dim()} in sample {index} "
                    f"but rank {reference.dim()} in sample 0"
                )
            if leaf.dtype != reference.dtype:
                raise AotiUsageError(
                    f"input '{name}' has dtype {leaf.dtype} in sample {index} "
                    f"but {reference.dtype} in sample 0"
                )


def _axis_sizes(leaves: list[list[Any]]) -> dict[_Axis, tuple[int, ...]]:
    """Size vector across samples of every tensor axis whose size changes."""
    sizes = {}
    for leaf_index, reference in enumerate(leaves[0]):
        if not isinstance(reference, torch.Tensor):
            continue
        for axis in range(reference.dim()):
            vector = tuple(int(sample[leaf_index].shape[axis]) for sample in leaves)
            if len(set(vector)) > 1:
                sizes[_Axis(leaf_index, axis)] = vector
    return sizes


def _cluster_axes(sizes: Mapping[_Axis, tuple[int, ...]]) -> list[_Cluster]:
    """Group dynamic axes under roots, smallest first, so ``k`` and ``c`` are positive."""
    vectors = list(dict.fromkeys(sizes.values()))  # first-appearance order
    order = sorted(range(len(vectors)), key=lambda i: (min(vectors[i]), i))
    clusters: list[_Cluster] = []
    relation: dict[tuple[int, ...], tuple[_Cluster, int, int]] = {}
    for index in order:
        vector = vectors[index]
        for cluster in clusters:
            found = _relation(cluster.root, vector)
            if found is not None:
                relation[vector] = (cluster, *found)
                break
        else:
            cluster = _Cluster(root=vector, members=[])
            clusters.append(cluster)
            relation[vector] = (cluster, 1, 0)
    for axis, vector in sizes.items():
        cluster, scale, offset = relation[vector]
        cluster.members.append((axis, scale, offset))
    return clusters


def _relation(root: tuple[int, ...], vector: tuple[int, ...]) -> tuple[int, int] | None:
    """``(k, 0)`` if ``vector == k * root``, ``(1, c)`` if ``vector == root + c``, else None."""
    if all(r > 0 for r in root) and vector[0] % root[0] == 0:
        scale = vector[0] // root[0]
        if scale > 1 and all(v == scale * r for r, v in zip(root, vector)):
            return scale, 0
    offset = vector[0] - root[0]
    if offset > 0 and all(v == r + offset for r, v in zip(root, vector)):
        return 1, offset
    return None


def _make_dims(
    clusters: list[_Cluster], names: list[str], max_size: int | None
) -> dict[_Axis, Any]:
    dims: dict[_Axis, Any] = {}
    used: set[str] = set()
    for cluster in clusters:
        if min(cluster.root) < MIN_DYNAMIC_SIZE:
            # a 0 or 1 size specializes: an error for a named Dim, AUTO lets export decide
            for axis, _, _ in cluster.members:
                dims[axis] = Dim.AUTO
            continue
        largest = max(cluster.root)
        if max_size is not None and max_size < largest:
            raise AotiUsageError(f"max_size={max_size} is below a sample size of {largest}")
        root = Dim(_dim_name(cluster, names, used), min=MIN_DYNAMIC_SIZE, max=max_size)
        for axis, scale, offset in cluster.members:
            dims[axis] = root if scale == 1 and offset == 0 else root * scale + offset
    return dims


def _dim_name(cluster: _Cluster, names: list[str], used: set[str]) -> str:
    roots = [axis for axis, scale, offset in cluster.members if scale == 1 and offset == 0]
    first_axes = {axis.leaf for axis in roots if axis.axis == 0}
    base = "batch" if len(first_axes) > 1 else f"{names[roots[0].leaf]}_dim{roots[0].axis}"
    if keyword.iskeyword(base) or base == "Dim":
        base = f"{base}_"
    return _fresh(base, used)
