"""Weight sets: new values for each weight of a module's state dict (its parameters and
persistent buffers), in the weight's own dtype, shape, device and range.

A floating weight is drawn around its own mean with its own spread, clamped to its
[min, max]: the activations keep their scale, so a deep model stays as well conditioned
as it was. A weight whose swap cannot be told apart is kept as it is: an integer or bool
one (an index, a count), one whose elements all hold one value (a one-element scale, a
zero bias, a norm's ones: its range is that value), one holding NaN or infinities, an
empty one, and a buffer the program mutates (its state is the program's, not a weight).
Each set comes from a seed derived from the test id, the program's key and the set's
index, so the check draws the same weights on every run. Tied weights (one tensor under
several names) are one weight with all its names.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch

from pytest_aoti.api import CheckContext

KEPT_INTEGER = "integer"
KEPT_SINGLE = "single-valued"
KEPT_NOT_FINITE = "not finite"
KEPT_EMPTY = "empty"
KEPT_STATE = "mutated by the program"


@dataclass(frozen=True)
class Weight:
    """One tensor of the module's state dict, under every name it has there."""

    names: tuple[str, ...]
    """Its state-dict names (FQNs), sorted; several for tied weights."""
    tensor: torch.Tensor
    """The module's own tensor (never written)."""
    kept: str = ""
    """Why it keeps its value in every set (``""``: it is drawn)."""
    stats: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    """A drawn weight's minimum, maximum, mean and standard deviation, read once."""

    @property
    def name(self) -> str:
        return self.names[0]


def module_weights(module: torch.nn.Module, mutated: Iterable[str] = ()) -> list[Weight]:
    """The weights of ``module``'s state dict, by first name, each drawn or kept."""
    by_tensor: dict[int, list[str]] = {}
    tensors: dict[int, torch.Tensor] = {}
    for name, tensor in module.state_dict(keep_vars=True).items():
        if not isinstance(tensor, torch.Tensor):
            continue  # an extra state entry (get_extra_state): no weight
        by_tensor.setdefault(id(tensor), []).append(name)
        tensors[id(tensor)] = tensor
    written = set(mutated)
    weights = []
    for key, names in by_tensor.items():
        tensor = tensors[key]
        kept = KEPT_STATE if written & set(names) else kept_because(tensor)
        stats = _stats(tensor) if not kept else (0.0, 0.0, 0.0, 0.0)
        weights.append(Weight(tuple(sorted(names)), tensor, kept, stats))
    return sorted(weights, key=lambda weight: weight.name)


def kept_because(tensor: torch.Tensor) -> str:
    """Why a swap of ``tensor`` cannot be told apart (``""``: it can)."""
    if not tensor.dtype.is_floating_point:
        return KEPT_INTEGER  # integers, bools; complex weights too
    if tensor.numel() == 0:
        return KEPT_EMPTY
    low, high = _range(tensor)
    if not (math.isfinite(low) and math.isfinite(high)):  # a NaN makes both NaN
        return KEPT_NOT_FINITE
    return KEPT_SINGLE if low == high else ""


def weight_seed(label: str, program_key: str, index: int) -> int:
    """The seed of weight set ``index``: the same for a test and its program on every run."""
    digest = hashlib.sha256(f"{label}|{program_key}|weights|{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def draw_set(weights: Iterable[Weight], seed: int) -> dict[str, torch.Tensor]:
    """New values for every drawn weight, by its first name."""
    generator = torch.Generator().manual_seed(seed)
    return {weight.name: drawn_like(weight, generator) for weight in weights if not weight.kept}


def drawn_like(weight: Weight, generator: torch.Generator) -> torch.Tensor:
    """Values of the weight's dtype, shape, strides and device, drawn around its mean with
    its spread and clamped to its [min, max]."""
    data = weight.tensor.detach()
    low, high, mean, spread = weight.stats
    laid_out = torch.empty_like(data)  # the weight's own strides (a dense layout kept)
    work = laid_out if data.device.type == "cpu" else torch.empty_like(data, device="cpu")
    if work.dtype not in (torch.float32, torch.float64):  # drawn in float32, then rounded
        work = torch.empty(data.shape, dtype=torch.float32)
    work.normal_(mean, spread or (high - low) / 2, generator=generator).clamp_(low, high)
    if work is not laid_out:
        laid_out.copy_(work)
    return laid_out


def _range(tensor: torch.Tensor) -> tuple[float, float]:
    data = tensor.detach()
    if data.dtype.is_floating_point and data.dtype not in (torch.float32, torch.float64):
        data = data.float()  # float8 has no aminmax; every narrower float fits float32
    low, high = torch.aminmax(data)
    return float(low), float(high)


def _stats(tensor: torch.Tensor) -> tuple[float, float, float, float]:
    data = tensor.detach()
    spread, mean = torch.std_mean(
        data.to(torch.float64 if data.dtype == torch.float64 else torch.float32)
    )
    return (*_range(data), float(mean), float(spread))


def with_values(
    weights: Iterable[Weight], new: Mapping[str, torch.Tensor], names: Iterable[str] | None = None
) -> dict[str, torch.Tensor]:
    """Every state-dict name of ``weights`` -> its tensor: the new value of those of ``names``
    (default: all) drawn in ``new``, the module's own otherwise."""
    chosen = None if names is None else set(names)
    values: dict[str, torch.Tensor] = {}
    for weight in weights:
        value = new.get(weight.name) if chosen is None or weight.name in chosen else None
        for name in weight.names:
            values[name] = weight.tensor if value is None else value
    return values


def used_names(exported: torch.export.ExportedProgram) -> set[str]:
    """The FQNs of the parameters and buffers the exported program reads."""
    signature = exported.graph_signature
    by_input = {**signature.inputs_to_parameters, **signature.inputs_to_buffers}
    return {
        by_input[node.name]
        for node in exported.graph.nodes
        if node.op == "placeholder" and node.name in by_input and node.users
    }


def module_holding(module: torch.nn.Module, values: Mapping[str, torch.Tensor]) -> torch.nn.Module:
    """A copy of ``module`` whose state-dict tensors are ``values`` (by name; a Parameter
    stays one), sharing the tensors ``values`` keeps as they are; ``module`` is not touched."""
    memo: dict[int, object] = {}
    for name, tensor in module.state_dict(keep_vars=True).items():
        value = values.get(name, tensor)
        if not isinstance(tensor, torch.Tensor) or id(tensor) in memo:
            continue
        if value is tensor:
            memo[id(tensor)] = tensor
        elif isinstance(tensor, torch.nn.Parameter):
            memo[id(tensor)] = torch.nn.Parameter(value, requires_grad=tensor.requires_grad)
        else:
            memo[id(tensor)] = value
    for parameter in module.parameters():
        memo.setdefault(id(parameter), parameter)  # never copied: eager never writes one
    return CheckContext.copy_module(
        module, memo
    )  # field by field where copy.deepcopy cannot copy it
