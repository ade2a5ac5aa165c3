"""The user's ``dynamic_shapes`` spec: the axes it names, the sizes it rules out, and the
names its dims (``Dim("batch")``) give to a program's shape symbols."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch.export import Dim, ExportedProgram
from torch.export.dynamic_shapes import _DerivedDim, _DimHint

from pytest_aoti.errors import AotiUsageError
from pytest_aoti.mutation_maps import forward_arg_names, named_user_inputs
from pytest_aoti.shapes.read import ProgramShapes, finite_bound, format_range, parse_size


@dataclass(frozen=True)
class SpecAxis:
    """One axis the user's ``dynamic_shapes`` spec says something about."""

    path: str
    """The input as the user wrote it: ``x``, ``xs[0]``, ``d['key']``."""
    tensor: torch.Tensor
    """The example tensor at that place."""
    axis: int
    """The dim the spec names (negative as written)."""
    dim: Any
    """The spec's entry: a ``Dim``, a derived dim, ``Dim.AUTO``/``STATIC``/``DYNAMIC``, an int."""


def spec_axes(
    dynamic_shapes: Any, arguments: Mapping[str, Any], *, strict: bool = False
) -> list[SpecAxis]:
    """The axes ``dynamic_shapes`` names, each with its example tensor (``arguments``: forward's
    parameters to example values, in order). Parts not fitting the example are left to torch; with
    ``strict`` a dim beyond a tensor's rank raises (torch says "list assignment index out of range")."""
    if isinstance(dynamic_shapes, Mapping):
        tops = [
            (str(name), arguments[name], spec)
            for name, spec in dynamic_shapes.items()
            if name in arguments
        ]
    elif isinstance(dynamic_shapes, (list, tuple)):
        tops = [
            (name, value, spec) for (name, value), spec in zip(arguments.items(), dynamic_shapes)
        ]
    else:
        return []
    found: list[SpecAxis] = []
    for name, value, spec in tops:
        _walk_spec(name, value, spec, found, strict)
    return found


def _walk_spec(path: str, value: Any, spec: Any, found: list[SpecAxis], strict: bool) -> None:
    if spec is None:
        return
    if isinstance(value, torch.Tensor):
        if isinstance(spec, Mapping):
            entries = list(spec.items())
        elif isinstance(spec, (list, tuple)):
            entries = list(enumerate(spec))
        else:
            return
        rank = value.dim()
        for axis, dim in entries:
            if not isinstance(axis, int) or isinstance(axis, bool):
                continue
            if not -rank <= axis < rank:
                if strict:
                    dims = f"dims 0..{rank - 1}" if rank else "no dims"
                    raise AotiUsageError(
                        f"dynamic_shapes for input '{path}' names dim {axis}, but {path} has "
                        f"rank {rank} ({dims})"
                    )
                continue
            found.append(SpecAxis(path, value, axis, dim))
    elif isinstance(value, (list, tuple)) and isinstance(spec, (list, tuple)):
        for index, (item, item_spec) in enumerate(zip(value, spec)):
            _walk_spec(f"{path}[{index}]", item, item_spec, found, strict)
    elif isinstance(value, Mapping) and isinstance(spec, Mapping):
        for key, item_spec in spec.items():
            if key in value:
                _walk_spec(f"{path}[{key!r}]", value[key], item_spec, found, strict)


def forward_arguments(
    module: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The example inputs keyed by ``forward``'s parameter names (as export binds), or None."""
    try:
        return dict(inspect.signature(module.forward).bind(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        return None


def check_dynamic_shapes(
    module: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any], dynamic_shapes: Any
) -> None:
    """Refuse a dim an input lacks before export (whose IndexError names neither)."""
    arguments = forward_arguments(module, args, kwargs)
    if arguments is None:
        return
    if isinstance(dynamic_shapes, Mapping):
        _check_spec_keys(module, dynamic_shapes, arguments)
    spec_axes(dynamic_shapes, arguments, strict=True)


def _check_spec_keys(
    module: torch.nn.Module, dynamic_shapes: Mapping[Any, Any], arguments: Mapping[str, Any]
) -> None:
    """A dict spec is keyed by the example's input names (torch adds an unrelated hint)."""
    parameters = inspect.signature(module.forward).parameters.values()
    if any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters):
        return  # **kwargs inputs: torch knows their names
    unknown = [key for key in dynamic_shapes if key not in arguments]
    if not unknown:
        return
    names = list(arguments)
    close = difflib.get_close_matches(str(unknown[0]), names, n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise AotiUsageError(
        f"dynamic_shapes has key(s) {', '.join(map(repr, unknown))}{hint}, but the inputs "
        f"of {type(module).__name__}.forward are {', '.join(map(repr, names))}: key the "
        "spec by those names, or give a tuple in their order"
    )


def dim_label(dim: Any) -> str | None:
    """How the user wrote a bounding entry (``Dim('batch')``, ``2*d + 1``), else None."""
    if isinstance(dim, _DerivedDim):
        return str(dim.__name__)
    if isinstance(dim, Dim):
        return f"Dim({dim.__name__!r})"
    if isinstance(dim, _DimHint):
        return f"Dim.{dim.type.name}"
    return None


def _dim_bounds(dim: Any) -> tuple[int, int | None] | None:
    low, high = getattr(dim, "min", None), getattr(dim, "max", None)
    return None if low is None and high is None else (finite_bound(low) or 0, finite_bound(high))


def sizes_outside_spec(
    module: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any], dynamic_shapes: Any
) -> list[str]:
    """One line per example size outside its ``Dim``'s declared range."""
    arguments = forward_arguments(module, args, kwargs)
    if arguments is None:
        return []
    found = []
    for entry in spec_axes(dynamic_shapes, arguments):
        label, bounds = dim_label(entry.dim), _dim_bounds(entry.dim)
        if label is None or bounds is None:
            continue
        size = int(entry.tensor.shape[entry.axis])
        low, high = bounds
        if size < low or (high is not None and size > high):
            found.append(
                f"input '{entry.path}' has size {size} at dim {entry.axis}, outside {label} "
                f"range {format_range(low, high)}"
            )
    return found


def sizes_export_specializes(
    module: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any], dynamic_shapes: Any
) -> list[str]:
    """Named dims whose example size is 0 or 1, which export always specializes."""
    arguments = forward_arguments(module, args, kwargs)
    if arguments is None:
        return []
    return [
        f"input '{entry.path}' has size {int(entry.tensor.shape[entry.axis])} at dim "
        f"{entry.axis}, which export specializes: pass an example of size >= 2 for "
        f"{dim_label(entry.dim)}"
        for entry in spec_axes(dynamic_shapes, arguments)
        if dim_label(entry.dim) is not None
        and not isinstance(entry.dim, _DimHint)
        and int(entry.tensor.shape[entry.axis]) in (0, 1)
    ]


def name_symbols(
    program: ExportedProgram,
    shapes: ProgramShapes,
    dynamic_shapes: Any,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
) -> ProgramShapes:
    """``shapes`` with each symbol the user named through a ``Dim`` (or one derived from it) shown
    by that name, given what ``program`` was exported with; AUTO, DYNAMIC, static name nothing."""
    if dynamic_shapes is None:
        return shapes
    try:
        arguments = _exported_arguments(program, args, kwargs)
        leaves = named_user_inputs(program, tuple(args), kwargs)
        axes = spec_axes(dynamic_shapes, arguments)
    except (TypeError, ValueError):
        return shapes
    input_of = {id(leaf): name for name, leaf in leaves.items()}
    names: dict[str, str] = {}
    for entry in axes:
        if isinstance(entry.dim, _DerivedDim):
            user_name = str(entry.dim.root.__name__)
        elif isinstance(entry.dim, Dim):
            user_name = str(entry.dim.__name__)
        else:
            continue
        input_name = input_of.get(id(entry.tensor))
        if input_name is None:
            continue
        try:
            size = shapes.input(input_name).shape[entry.axis]
        except (KeyError, IndexError):
            continue
        if not isinstance(size, str):
            continue  # specialized by export
        symbols = parse_size(size).free_symbols
        if len(symbols) != 1 or (
            not isinstance(entry.dim, _DerivedDim) and not size.isidentifier()
        ):
            continue
        names.setdefault(str(next(iter(symbols))), user_name)
    names = {symbol: name for symbol, name in names.items() if symbol in shapes.symbols}
    return replace(shapes, names={**shapes.names, **names}) if names else shapes


def _exported_arguments(
    program: ExportedProgram, args: Sequence[Any], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """The inputs keyed by the forward's parameter names, as the program records them."""
    names = forward_arg_names(program)
    if len(names) < len(args):
        raise ValueError("the program does not record its parameter names")
    arguments = dict(zip(names, args))
    arguments.update((name, kwargs[name]) for name in names[len(args) :] if name in kwargs)
    arguments.update((name, value) for name, value in kwargs.items() if name not in arguments)
    return arguments
