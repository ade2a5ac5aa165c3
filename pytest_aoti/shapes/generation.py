"""Hypothesis strategies for inputs an exported program accepts (public in
:mod:`pytest_aoti.strategies`): one integer per shape symbol, so a failure shrinks toward the
smallest shape, and tensor values from a drawn seed (shrinks too; cheap for large tensors)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram

from pytest_aoti.errors import AotiUsageError
from pytest_aoti.mutation_maps import named_user_inputs
from pytest_aoti.shapes.read import (
    ProgramShapes,
    read_program_shapes,
    shapes_from_assignment,
    strides_from_assignment,
)
from pytest_aoti.trees import (
    clone_tree,
    distinct_shape,
    empty_with_layout,
    has_own_elements,
    laid_out_like,
    relaid,
    tensor_bytes,
)

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy


def shapes_for(program: Any, *, max_dim: int = 64) -> SearchStrategy[dict[str, tuple[int, ...]]]:
    """Shapes of the tensor inputs ``program`` (an ``ExportedProgram`` or one with ``.exported``)
    accepts: input name -> shape. Each symbol is drawn within its exported range, maxima capped
    at ``max_dim``; shrinking goes toward the minima."""
    shapes = read_program_shapes(_exported(program))
    return assignments(shapes, max_dim).map(lambda values: shapes_from_assignment(shapes, values))


def inputs_for(
    program: Any,
    *,
    like: tuple[Any, ...],
    like_kwargs: dict[str, Any] | None = None,
    max_dim: int = 64,
) -> SearchStrategy[tuple[tuple[Any, ...], dict[str, Any]]]:
    """``(args, kwargs)`` like the example ``like``/``like_kwargs``, with drawn shapes (see
    ``shapes_for``). Tensors keep the example's dtype and device; values are uniform in its [min,
    max] (floats: [-1, 1] where that is empty or not finite), bools random; other leaves kept."""
    from hypothesis import strategies as st  # loaded where shapes are drawn, not per check

    builder = InputBuilder(program, like=like, like_kwargs=like_kwargs)
    return st.builds(builder.build, assignments(builder.shapes, max_dim), st.integers(0, 2**32 - 1))


class InputBuilder:
    """``(args, kwargs)`` like an example for given sizes and seed: undrawn :func:`inputs_for`."""

    clone_tree = staticmethod(clone_tree)

    def __init__(
        self, program: Any, *, like: tuple[Any, ...], like_kwargs: dict[str, Any] | None = None
    ) -> None:
        exported = _exported(program)
        self.shapes: ProgramShapes = read_program_shapes(exported)
        leaves, self._treespec = pytree.tree_flatten((tuple(like), dict(like_kwargs or {})))
        self._leaves = leaves
        self._names = _leaf_names(exported, leaves, self._treespec)
        tensor_inputs = {spec.name for spec in self.shapes.inputs}
        self._makers = {
            index: _TensorMaker.like(leaf)
            for index, leaf in enumerate(leaves)
            if isinstance(leaf, torch.Tensor) and self._names[index] in tensor_inputs
        }

    def build(self, values: dict[str, int], seed: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Inputs whose shape symbols take ``values``, tensor values drawn from ``seed``."""
        sizes = shapes_from_assignment(self.shapes, values)
        strides = strides_from_assignment(self.shapes, values)
        generator = torch.Generator().manual_seed(seed)
        new_leaves = [
            self._makers[index].make(
                sizes[self._names[index]], generator, strides[self._names[index]]
            )
            if index in self._makers
            else leaf
            for index, leaf in enumerate(self._leaves)
        ]
        args, kwargs = pytree.tree_unflatten(new_leaves, self._treespec)
        return tuple(args), dict(kwargs)

    @staticmethod
    def distinct_like(example: torch.Tensor, seed: int) -> torch.Tensor:
        """A tensor like ``example`` (shape, dtype, device, layout, value range) with values
        of its own from ``seed``."""
        return distinct_like(example, seed)

    @staticmethod
    def value_range(example: torch.Tensor) -> tuple[float, float]:
        """The example's [min, max], or a default where it says nothing usable."""
        return value_range(example)

    @staticmethod
    def distinct_shape(example: torch.Tensor) -> tuple[int, ...]:
        """The shape of the values a tensor like ``example`` holds: every stride-0
        (expanded) dim of size 1."""
        return distinct_shape(example)

    @staticmethod
    def has_own_elements(example: torch.Tensor) -> bool:
        """Whether ``example``'s elements outside expanded dims have memory of their own
        (not ``unfold``'s): values of its own can be laid out like it."""
        return has_own_elements(example)

    @staticmethod
    def laid_out_like(values: torch.Tensor, example: torch.Tensor) -> torch.Tensor | None:
        """``values`` (of :meth:`distinct_shape`) laid out like ``example``: its sizes,
        strides, storage offset and expanded dims; None where its elements overlap."""
        return laid_out_like(values, example)

    @staticmethod
    def relaid(tensor: torch.Tensor, layout: str) -> torch.Tensor | None:
        """``tensor``'s values in memory layout ``layout`` (``channels_last`` for 4-D,
        ``channels_last_3d`` for 5-D, ``permuted``: the last two dims' strides swapped, for
        2-D and up), as the ``layouts`` option lays inputs out; None where it does not apply."""
        return relaid(tensor, layout)

    @staticmethod
    def tensor_bytes(tree: Any) -> int:
        """The bytes of every tensor of a pytree of inputs."""
        return tensor_bytes(tree)


def _exported(program: Any) -> ExportedProgram:
    exported = getattr(program, "exported", program)
    if not isinstance(exported, ExportedProgram):
        raise AotiUsageError(
            f"expected an ExportedProgram or an object with .exported, got {type(program).__name__}"
        )
    return exported


def assignments(shapes: ProgramShapes, max_dim: int) -> SearchStrategy[dict[str, int]]:
    """One integer per shape symbol within its capped range, shrinking to the minimum."""
    return shapes.assignments(max_dim)


def _leaf_names(program: ExportedProgram, leaves: list[Any], treespec: Any) -> list[str]:
    """The program's user-input name of each caller leaf (keywords may be reordered)."""
    args, kwargs = pytree.tree_unflatten(list(range(len(leaves))), treespec)
    try:
        index_by_name = named_user_inputs(program, args, kwargs)
    except ValueError as error:
        raise AotiUsageError(f"the example does not fit the program: {error}") from None
    name_by_index = {index: name for name, index in index_by_name.items()}
    return [name_by_index[index] for index in range(len(leaves))]


@dataclass(frozen=True)
class _TensorMaker:
    """Makes tensors with the dtype, device and value range of one example tensor."""

    dtype: torch.dtype
    device: torch.device
    low: float
    high: float  # ints for integer dtypes, exact even beyond 2**53
    dim_order: tuple[int, ...]
    """Dims from outermost to innermost in memory (``channels_last``: ``(0, 2, 3, 1)``)."""
    offset: int = 0
    """The example's storage offset (kept: the engine may rely on its alignment)."""

    @classmethod
    def like(cls, example: torch.Tensor) -> _TensorMaker:
        low, high = value_range(example)
        strides = example.stride()
        order = tuple(sorted(range(example.dim()), key=lambda dim: (-strides[dim], dim)))
        return cls(example.dtype, example.device, low, high, order, int(example.storage_offset()))

    def make(
        self,
        shape: tuple[int, ...],
        generator: torch.Generator,
        strides: tuple[int, ...] | None = None,
    ) -> torch.Tensor:
        """A tensor of ``shape`` laid out as exported: with ``strides`` where known (expanded
        dims given memory of their own), else with the example's dim order."""
        if strides is not None and len(strides) == len(shape):
            laid_out = empty_with_layout(shape, strides, self.offset, self.dtype, self.device)
            if has_own_elements(laid_out):
                own = distinct_shape(laid_out)
                laid_out.as_strided(own, strides, self.offset).copy_(self._values(own, generator))
                return laid_out
        in_memory_order = tuple(shape[dim] for dim in self.dim_order)
        values = self._values(in_memory_order, generator)
        if not shape:  # 0-dim: nothing to order
            return values
        return values.permute(*sorted(range(len(shape)), key=self.dim_order.__getitem__))

    def _values(self, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
        # Drawn on the CPU so that one seed gives the same values on every device.
        if self.dtype == torch.bool:
            values = torch.randint(0, 2, shape, generator=generator).bool()
        elif self.dtype.is_floating_point or self.dtype.is_complex:
            work = (
                torch.float64 if self.dtype in (torch.float64, torch.complex128) else torch.float32
            )
            values = _uniform(shape, self.low, self.high, work, generator)
            if self.dtype.is_complex:
                values = torch.complex(
                    values, _uniform(shape, self.low, self.high, work, generator)
                )
        else:
            values = _integers(shape, int(self.low), int(self.high), generator)
        return values.to(dtype=self.dtype, device=self.device)


def distinct_like(example: torch.Tensor, seed: int) -> torch.Tensor:
    """A tensor with the example's shape, dtype, device, layout and value range but values of its
    own from ``seed`` (a copy of its values where the example's elements overlap)."""
    generator = torch.Generator().manual_seed(seed)
    values = _TensorMaker.like(example).make(distinct_shape(example), generator)
    laid_out = laid_out_like(values, example)
    return laid_out if laid_out is not None else example.detach().clone()


def value_range(example: torch.Tensor) -> tuple[float, float]:
    """The example's [min, max], or a default where it says nothing usable."""
    floating = example.dtype.is_floating_point or example.dtype.is_complex
    if example.dtype == torch.bool:
        return 0, 1
    if example.numel() == 0:
        return (-1.0, 1.0) if floating else (0, 0)
    data = example.detach()
    if example.dtype.is_complex:
        data = torch.view_as_real(data)
    if floating:
        data = data.to(torch.float64)
        low, high = float(data.min()), float(data.max())
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            return -1.0, 1.0
        return low, high
    return int(data.min()), int(data.max())


def _uniform(
    shape: tuple[int, ...], low: float, high: float, dtype: torch.dtype, generator: torch.Generator
) -> torch.Tensor:
    values = torch.rand(shape, generator=generator, dtype=dtype)
    # Clamp: rounding in low + (high - low) * u can land just outside [low, high].
    return (low + (high - low) * values).clamp(low, high)


def _integers(
    shape: tuple[int, ...], low: int, high: int, generator: torch.Generator
) -> torch.Tensor:
    # randint's upper bound is exclusive and must fit in int64.
    upper = min(high + 1, torch.iinfo(torch.int64).max)
    return torch.randint(low, upper, shape, generator=generator, dtype=torch.int64)
