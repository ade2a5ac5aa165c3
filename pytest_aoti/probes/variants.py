"""The variants of an example that deployment probes call the engine with.

Per input, by what it is: other memory layouts of the same values (by rank), other sizes
(by the exported dims: static ones, and just outside a dynamic dim's range), other floating
dtypes, another device where the program has one, another value of a Python scalar,
aliased inputs where the program mutates one, and edge values of floating inputs (NaN,
infinities, magnitudes near the dtype's overflow and of 1e10 and more). Every variant is
built from copies: the caller's tensors are never touched.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.utils._pytree as pytree

from pytest_aoti.api import AotiUsageError, InputBuilder, ProgramCall
from pytest_aoti.probes.feature import PROBE_KINDS, ProbeVariant, probes_skip_problem

if TYPE_CHECKING:
    from pytest_aoti.api import AotiProgram


def check_skip(value: Any) -> dict[str, frozenset[str]]:
    """``probes_skip`` as ``{input name or "*": kinds}``.

    Accepted: a set of kinds for every input (``{"channels_last"}``), or a dict of input
    name to a set of kinds (``{"x": {"channels_last", "size"}}``); ``"*"`` stands for all
    kinds. A bad value is a usage error (its row's check, :func:`probes_skip_problem`).
    """
    problem = probes_skip_problem("probes_skip", value)
    if problem:
        raise AotiUsageError(problem)
    if value is None:
        return {}

    def kinds(names: Any) -> frozenset[str]:
        chosen = frozenset(str(name) for name in ({names} if isinstance(names, str) else names))
        return frozenset(PROBE_KINDS) if "*" in chosen else chosen

    if isinstance(value, Mapping):
        return {str(name): kinds(names) for name, names in value.items()}
    return {"*": kinds(value)}


# --- variants -----------------------------------------------------------------------------


@dataclass
class Variant:
    """One probe input set: the example with one input changed."""

    input: str
    variant: str
    kind: ProbeVariant
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    outside_contract: bool = False
    """The exported program declares something else (dtype, device) than this variant has,
    whether or not ``exported.module()`` checks it."""
    risky: bool = False
    """The engine may read or write out of bounds (smaller size, narrower dtype, another
    device)."""
    eager_inputs: tuple[tuple[Any, ...], dict[str, Any]] | None = None
    """What eager runs on instead of the variant: the example itself, for a device
    variant (the caller means the same values; eager cannot mix devices)."""


def choose_variants(
    program: AotiProgram,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    skip: Mapping[str, frozenset[str]],
) -> list[Variant]:
    """The variants worth probing for this program and example: layouts by rank, sizes by
    the exported dims, dtypes of floating inputs, devices where the program has one,
    values of Python scalars, aliasing where an input is mutated. Inputs are copies;
    the caller's tensors are never touched."""
    exported = program.exported
    names = _user_input_names(exported)
    leaves, spec = pytree.tree_flatten(
        InputBuilder.clone_tree((tuple(args), ProgramCall(exported).ordered_kwargs(kwargs)))
    )
    if len(leaves) != len(names):
        return []
    maker = _VariantMaker(names, leaves, spec, skip)
    dims = _exported_dims(exported)
    for index, (name, leaf) in enumerate(zip(names, leaves)):
        if isinstance(leaf, torch.Tensor):
            if leaf.layout == torch.strided and leaf.numel() >= 2:
                maker.tensor_variants(index, name, leaf, dims.get(name, ()))
        elif isinstance(leaf, (int, float)) and not maker.skipped(name, ProbeVariant.SCALAR):
            new = (not leaf) if isinstance(leaf, bool) else leaf + 1
            maker.make({index: new}, name, f"value={new!r}", ProbeVariant.SCALAR)
    # aliased *example* inputs are the aliasing check's: never both report an input set
    if program.mutated_inputs and not ProgramCall(exported).aliased(args, kwargs):
        maker.aliasing_variants(program.mutated_inputs)
    return maker.variants


class _VariantMaker:
    """The variants of one example, each a copy of its flat inputs with some leaves changed."""

    def __init__(
        self,
        names: Sequence[str],
        leaves: list[Any],
        spec: Any,
        skip: Mapping[str, frozenset[str]],
    ) -> None:
        self.names, self.leaves, self.spec, self.skip = names, leaves, spec, skip
        example_args, example_kwargs = pytree.tree_unflatten(leaves, spec)
        self.example = (tuple(example_args), dict(example_kwargs))
        self.variants: list[Variant] = []

    def skipped(self, name: str, kind: ProbeVariant) -> bool:
        return kind in self.skip.get(name, frozenset()) or kind in self.skip.get("*", frozenset())

    def make(
        self, changes: Mapping[int, Any], name: str, variant: str, kind: ProbeVariant, **extra: Any
    ) -> None:
        fresh = [changes.get(index, leaf) for index, leaf in enumerate(self.leaves)]
        new_args, new_kwargs = pytree.tree_unflatten(fresh, self.spec)
        self.variants.append(
            Variant(name, variant, kind, tuple(new_args), dict(new_kwargs), **extra)
        )

    def tensor_variants(self, index: int, name: str, leaf: torch.Tensor, dims: Any) -> None:
        """Layouts, sizes, dtypes and devices of one tensor input."""
        for kind, tensor in _layouts(leaf):
            if not self.skipped(name, kind):
                self.make({index: tensor}, name, kind, kind)
        if not self.skipped(name, ProbeVariant.SIZE):
            for label, tensor, risky in _sizes(leaf, dims):
                self.make({index: tensor}, name, label, ProbeVariant.SIZE, risky=risky)
        if not self.skipped(name, ProbeVariant.DTYPE):
            for dtype, risky in _dtypes(leaf):
                label = f"dtype={str(dtype).removeprefix('torch.')}"
                changes = {index: leaf.to(dtype)}
                self.make(
                    changes, name, label, ProbeVariant.DTYPE, outside_contract=True, risky=risky
                )
        if not self.skipped(name, ProbeVariant.VALUES):
            for label, tensor in edge_values(leaf):
                self.make({index: tensor}, name, label, ProbeVariant.VALUES)
        if not self.skipped(name, ProbeVariant.DEVICE):
            for device in _devices(leaf):
                self.make(
                    {index: leaf.to(device)},
                    name,
                    f"device={device}",
                    ProbeVariant.DEVICE,
                    outside_contract=True,
                    risky=True,
                    eager_inputs=self.example,
                )

    def aliasing_variants(self, mutated: Iterable[str]) -> None:
        """Each mutated input sharing storage with one other input of its shape and dtype:
        the same tensor, and overlapping views."""
        tensors = {
            name: (index, leaf)
            for index, (name, leaf) in enumerate(zip(self.names, self.leaves))
            if isinstance(leaf, torch.Tensor) and leaf.layout == torch.strided and leaf.dim()
        }
        for target in sorted(set(mutated) & set(tensors)):
            t_index, t_leaf = tensors[target]
            for other, (o_index, o_leaf) in tensors.items():
                if (
                    other == target
                    or self.skipped(target, ProbeVariant.ALIASED)
                    or self.skipped(other, ProbeVariant.ALIASED)
                ):
                    continue
                if o_leaf.shape != t_leaf.shape or o_leaf.dtype != t_leaf.dtype:
                    continue
                label = f"{target}, {other}"
                shared = t_leaf.clone()
                self.make(
                    {t_index: shared, o_index: shared}, label, "same tensor", ProbeVariant.ALIASED
                )
                rows = t_leaf.shape[0]
                if rows >= 2:
                    shift = max(1, rows // 2)
                    base = torch.cat([t_leaf, o_leaf[rows - shift :]])
                    views = {t_index: base[:rows], o_index: base[shift : shift + rows]}
                    self.make(views, label, "overlapping views", ProbeVariant.ALIASED)
                break  # one partner per mutated input is enough


def _layouts(leaf: torch.Tensor) -> list[tuple[ProbeVariant, torch.Tensor]]:
    """Same shape and values in other memory layouts; none that equals the example's."""
    found: list[tuple[ProbeVariant, torch.Tensor]] = []
    for kind in (ProbeVariant.CHANNELS_LAST, ProbeVariant.CHANNELS_LAST_3D):
        other = InputBuilder.relaid(leaf, kind.value)  # the layouts option's own relaying
        if other is not None:
            found.append((kind, other))
    if leaf.dim() >= 2:  # every stride reversed; the layouts option swaps the last two only
        order = list(reversed(range(leaf.dim())))
        found.append((ProbeVariant.PERMUTED, leaf.permute(order).contiguous().permute(order)))
    bigger = torch.zeros(
        (*leaf.shape[:-1], 2 * leaf.shape[-1]), dtype=leaf.dtype, device=leaf.device
    )
    bigger[..., ::2] = leaf
    found.append((ProbeVariant.STRIDED_SLICE, bigger[..., ::2]))
    flat = torch.zeros(leaf.numel() + 1, dtype=leaf.dtype, device=leaf.device)
    flat[1:] = leaf.reshape(-1)
    found.append((ProbeVariant.STORAGE_OFFSET, flat[1:].view(leaf.shape)))
    return [
        (kind, tensor)
        for kind, tensor in found
        if tensor.stride() != leaf.stride() or tensor.storage_offset() != leaf.storage_offset()
    ]


def _sizes(
    leaf: torch.Tensor, dims: tuple[tuple[int, int] | None, ...]
) -> list[tuple[str, torch.Tensor, bool]]:
    """Another size of each static dim (one more; one less for dim 0), and sizes just
    outside a dynamic dim's range. ``dims`` holds None for a static dim, else its range."""
    found: list[tuple[str, torch.Tensor, bool]] = []

    def resized(dim: int, size: int) -> torch.Tensor:
        now = leaf.shape[dim]
        if size <= now:
            return leaf.narrow(dim, 0, size).contiguous()
        reps = [leaf] * (size // now) + [leaf.narrow(dim, 0, size % now)]
        return torch.cat(reps, dim).contiguous()

    for dim, size in enumerate(leaf.shape):
        bounds = dims[dim] if dim < len(dims) else None
        if bounds is None:
            found.append((f"size[{dim}]={size + 1}", resized(dim, size + 1), False))
            if dim == 0 and size > 1:
                found.append((f"size[{dim}]={size - 1}", resized(dim, size - 1), True))
            continue
        low, high = bounds
        if high is not None and high + 1 <= max(4 * size, 64):
            found.append((f"size[{dim}]={high + 1}", resized(dim, high + 1), False))
        if low is not None and low >= 1 and size >= 1:
            found.append((f"size[{dim}]={low - 1}", resized(dim, low - 1), True))
    return found


EDGE_SPREAD = 0.6180339887498949
"""Where each element's magnitude falls in an edge range: its flat index times the golden
ratio, modulo 1 (neighbours far apart, every run the same)."""


def edge_values(leaf: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """The example's values with edge values of its dtype, in its layout: NaN, +inf and -inf
    in every other element (so a reduction sees both kinds); magnitudes from just under
    the dtype's ``exp`` overflow to just under ``cosh``'s (88.2 to 89.4 for float32), and of
    1e10 to 1e12 where the dtype holds them, each with its example element's sign."""
    if not leaf.is_floating_point() or leaf.numel() == 0:
        return []
    info = torch.finfo(leaf.dtype)
    flat = leaf.detach().reshape(-1)
    index = torch.arange(flat.numel(), device=leaf.device, dtype=torch.float64)
    every_other = (index % 2) == 0
    spread = (index * EDGE_SPREAD) % 1.0
    sign = torch.where(flat < 0, -1.0, 1.0).to(torch.float64)

    def shaped(values: torch.Tensor) -> torch.Tensor:
        made = leaf.detach().clone()  # the example's strides and offset, not a contiguous copy
        made.copy_(values.to(leaf.dtype).view(leaf.shape))
        return made

    found = [
        (f"values={name}", shaped(torch.where(every_other, value, flat.to(torch.float64))))
        for name, value in (("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf))
    ]
    low, high = math.log(info.max) - 0.5, math.log(2 * info.max) - 0.05
    found.append((f"values={low:.3g}..{high:.3g}", shaped(sign * (low + (high - low) * spread))))
    if info.max >= 1e12:
        found.append(("values=1e10..1e12", shaped(sign * torch.pow(10.0, 10.0 + 2.0 * spread))))
    return found


def _dtypes(leaf: torch.Tensor) -> list[tuple[torch.dtype, bool]]:
    """A wider and a narrower floating dtype (the narrower one may read out of bounds)."""
    if not leaf.is_floating_point():
        return []
    if leaf.dtype == torch.float32:
        return [(torch.float64, False), (torch.float16, True)]
    if leaf.dtype in (torch.float16, torch.bfloat16):
        return [(torch.float32, False)]
    if leaf.dtype == torch.float64:
        return [(torch.float32, True)]
    return []


def _devices(leaf: torch.Tensor) -> list[str]:
    """A CPU input to a CUDA engine; another CUDA index where there is one."""
    if leaf.device.type != "cuda":
        return []
    found = ["cpu"]
    count = torch.cuda.device_count()
    if count > 1:
        found.append(f"cuda:{((leaf.device.index or 0) + 1) % count}")
    return found


def _user_input_names(exported: Any) -> tuple[str, ...]:
    return ProgramCall(exported).names


def _exported_dims(exported: Any) -> dict[str, tuple[tuple[int, int] | None, ...]]:
    """Per tensor input, per dim: None where static, else the ``(min, max)`` of its range
    (None for an unbounded end)."""
    names = set(_user_input_names(exported))
    ranges = {str(symbol): value for symbol, value in exported.range_constraints.items()}
    found: dict[str, tuple[tuple[int, int] | None, ...]] = {}
    for node in exported.graph.nodes:
        if node.op != "placeholder" or node.name not in names:
            continue
        value = node.meta.get("val")
        shape = getattr(value, "shape", None)
        if shape is None:
            continue
        dims: list[tuple[int, int] | None] = []
        for size in shape:
            if isinstance(size, int):
                dims.append(None)
                continue
            bound = ranges.get(str(size.node.expr))
            low = _finite(getattr(bound, "lower", None))
            high = _finite(getattr(bound, "upper", None))
            dims.append((low if low is not None else 0, high))  # type: ignore[arg-type]
        found[node.name] = tuple(dims)
    return found


def _finite(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if abs(number) < 2**62 else None
