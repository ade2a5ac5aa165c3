"""The shapes an exported program accepts, read from its placeholders and ``range_constraints``
as plain data. An engine does not check its inputs against its ranges, so
:mod:`~pytest_aoti.shapes.validate` checks them with this."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sympy
import torch
from torch.export.graph_signature import ConstantArgument, InputKind
from torch.utils._sympy import functions
from torch.utils._sympy.numbers import int_oo
from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

from pytest_aoti.mutation_maps import read_signature_names

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy
    from torch.export import ExportedProgram


@dataclass(frozen=True)
class SymbolRange:
    """Exported range of one shape symbol; ``max`` None means unbounded."""

    name: str
    min: int
    max: int | None


@dataclass(frozen=True)
class InputSpec:
    """One tensor user input: each size is an int (static) or a sympy expression's text."""

    name: str
    shape: tuple[int | str, ...]
    dtype: torch.dtype
    device: torch.device
    layout: str = "any"
    """The exported memory layout (``contiguous``, ``channels_last`` or ``any``): the engine
    reads inputs with the exported strides, so another layout gives wrong results."""
    strides: tuple[int | str, ...] = ()
    """The exported strides, each an int or an expression's text over the shape symbols
    (a sliced example's ``(16, 2)``, a contiguous one's ``(s77, 1)``); empty where unknown."""


@dataclass(frozen=True)
class ProgramShapes:
    """The tensor inputs an exported program accepts, as plain data."""

    inputs: tuple[InputSpec, ...]
    """Tensor user inputs, in signature order."""
    symbols: dict[str, SymbolRange]
    """Free symbols of the input shapes, in order of first appearance, and their ranges."""
    constants: dict[str, Any] = field(default_factory=dict)
    """Non-tensor user inputs and their exported value (the engine ignores what a caller passes)."""
    names: dict[str, str] = field(default_factory=dict)
    """Display names of the symbols the user named (``{"s77": "batch"}``), for messages only."""

    def input(self, name: str) -> InputSpec:
        for spec in self.inputs:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def dim_range(self, input_name: str, axis: int) -> tuple[int, int | None]:
        """Allowed size range of one dim; ``None`` as the maximum means unbounded."""
        size = self.input(input_name).shape[axis]
        if isinstance(size, int):
            return size, size
        expr = parse_size(size)
        ranges = {}
        for symbol in expr.free_symbols:
            symbol_range = self.symbols.get(str(symbol), SymbolRange(str(symbol), 0, None))
            upper = int_oo if symbol_range.max is None else symbol_range.max
            ranges[symbol] = ValueRanges(sympy.Integer(symbol_range.min), upper)
        bounds = bound_sympy(expr, ranges)
        return max(0, finite_bound(bounds.lower) or 0), finite_bound(bounds.upper)

    def display(self, size: Any) -> str:
        """A size or expression as the user wrote it: ``2*batch`` for ``2*s77``."""
        text = str(size)
        if not self.names:
            return text
        return re.sub(r"[A-Za-z_]\w*", lambda word: self.names.get(word[0], word[0]), text)

    def symbol_label(self, symbol: Any) -> str:
        """``Dim batch`` for a symbol the user named, else ``symbol s77``."""
        name = self.names.get(str(symbol))
        return f"Dim {name}" if name is not None else f"symbol {symbol}"

    def sizes_at(self, values: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
        """Each tensor input's concrete shape where the symbols take ``values``."""
        return shapes_from_assignment(self, values)

    def boundary_assignments(self, max_dim: int) -> list[dict[str, int]]:
        """Symbol values at the edges of the exported ranges (:func:`boundary_assignments`)."""
        return boundary_assignments(self, max_dim)

    def assignments(self, max_dim: int) -> SearchStrategy[dict[str, int]]:
        """A Hypothesis strategy: one integer per symbol within its range (an unbounded one
        capped at ``max_dim``), shrinking to the minimum."""
        from hypothesis import strategies as st

        symbols = {
            name: st.integers(*cap_range(symbol_range, max_dim))
            for name, symbol_range in self.symbols.items()
        }
        # symbols drawn in range keep plain and linear dims in range; this catches the rest
        return st.fixed_dictionaries(symbols).filter(lambda values: assignment_fits(self, values))


def read_program_shapes(program: ExportedProgram) -> ProgramShapes:
    """Read the shapes ``program`` (exported or decomposed) accepts."""
    names = set(read_signature_names(program))
    inputs: list[InputSpec] = []
    free: dict[str, Any] = {}
    for node in program.graph.nodes:
        if node.op != "placeholder" or node.name not in names:
            continue
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor):
            continue  # constant user inputs are read from the signature below
        for size in value.shape:
            if not isinstance(size, int):
                for symbol in sorted(size.node.expr.free_symbols, key=str):
                    free.setdefault(str(symbol), symbol)
        shape, strides = tuple(map(_size, value.shape)), tuple(map(_size, value.stride()))
        inputs.append(
            InputSpec(node.name, shape, value.dtype, value.device, _layout(value), strides)
        )
    ranges = {str(key): value for key, value in program.range_constraints.items()}
    symbols = {name: _symbol_range(name, ranges.get(name)) for name in free}
    return ProgramShapes(inputs=tuple(inputs), symbols=symbols, constants=_constants(program))


def _size(size: Any) -> int | str:
    """A size or stride as an int or an expression's text, read without a guard."""
    if isinstance(size, int):
        return size
    expr = size.node.expr
    return int(expr) if expr.is_number else str(expr)


def _layout(value: torch.Tensor) -> str:
    try:
        if value.is_contiguous():
            return "contiguous"
        if value.dim() == 4 and value.is_contiguous(memory_format=torch.channels_last):
            return "channels_last"
    except Exception:  # symbolic strides that cannot be decided here
        pass
    return "any"


def _constants(program: ExportedProgram) -> dict[str, Any]:
    return {
        spec.arg.name: spec.arg.value
        for spec in program.graph_signature.input_specs
        if spec.kind == InputKind.USER_INPUT and isinstance(spec.arg, ConstantArgument)
    }


def _symbol_range(name: str, value_range: Any) -> SymbolRange:
    if value_range is None:
        return SymbolRange(name, 0, None)
    return SymbolRange(
        name, max(0, finite_bound(value_range.lower) or 0), finite_bound(value_range.upper)
    )


def finite_bound(bound: Any) -> int | None:
    """``bound`` as an int, or None for infinities (``int_oo`` claims ``is_finite``)."""
    return int(bound) if isinstance(bound, (int, sympy.Integer)) else None


@functools.lru_cache(maxsize=1024)
def parse_size(text: str) -> sympy.Expr:
    """The sympy expression of a size's text, over integer symbols."""
    names = set(re.findall(r"[A-Za-z_]\w*", text))
    local = {name: getattr(functions, name) for name in names if hasattr(functions, name)}
    local.update(
        {name: sympy.Symbol(name, integer=True, nonnegative=True) for name in names - set(local)}
    )
    return sympy.sympify(text, locals=local)


def format_range(low: int, high: int | None) -> str:
    """``[low, high]``, or ``[low, inf)`` for an unbounded range."""
    return f"[{low}, inf)" if high is None else f"[{low}, {high}]"


def cap_range(r: SymbolRange, max_dim: int) -> tuple[int, int]:
    """``r`` as a finite range: maxima above ``max_dim`` become ``max_dim``, never below min."""
    high = max_dim if r.max is None else min(r.max, max_dim)
    return r.min, max(high, r.min)


def boundary_assignments(shapes: ProgramShapes, max_dim: int) -> list[dict[str, int]]:
    """Symbol assignments at the edges of the exported ranges: all at their minimum, all at their
    maximum, then each at one end with the others at the other. A declared maximum is used however
    large, an unbounded one capped at ``max_dim``; duplicates and ones out of an input's range go."""
    ranges = {
        name: (r.min, r.max) if r.max is not None else cap_range(r, max_dim)
        for name, r in shapes.symbols.items()
    }
    lows = {name: low for name, (low, _) in ranges.items()}
    highs = {name: high for name, (_, high) in ranges.items()}
    candidates = [lows, highs]
    for name in ranges:
        candidates.append({**highs, name: lows[name]})
        candidates.append({**lows, name: highs[name]})
    result: list[dict[str, int]] = []
    for candidate in candidates:
        if candidate not in result and assignment_fits(shapes, candidate):
            result.append(candidate)
    return result


def assignment_fits(shapes: ProgramShapes, values: Mapping[str, int]) -> bool:
    """Whether every input dim, evaluated at ``values``, lies within its allowed range."""
    for spec in shapes.inputs:
        for axis, size in enumerate(_evaluated(spec.shape, values)):
            low, high = shapes.dim_range(spec.name, axis)
            if size < low or (high is not None and size > high):
                return False
    return True


def shapes_from_assignment(
    shapes: ProgramShapes, values: Mapping[str, int]
) -> dict[str, tuple[int, ...]]:
    """Concrete shape of every tensor input for one symbol assignment."""
    return {spec.name: _evaluated(spec.shape, values) for spec in shapes.inputs}


def strides_from_assignment(
    shapes: ProgramShapes, values: Mapping[str, int]
) -> dict[str, tuple[int, ...] | None]:
    """Each tensor input's exported strides under one assignment (None where unknown)."""
    found: dict[str, tuple[int, ...] | None] = {}
    for spec in shapes.inputs:
        try:
            found[spec.name] = _evaluated(spec.strides, values) if spec.strides else None
        except (KeyError, TypeError, ValueError):  # an unbacked or unknown symbol
            found[spec.name] = None
    return found


def _evaluated(sizes: tuple[int | str, ...], values: Mapping[str, int]) -> tuple[int, ...]:
    found = []
    for size in sizes:
        if isinstance(size, int):
            found.append(size)
            continue
        if size in values:  # a dim that is one symbol: no expression to evaluate
            found.append(int(values[size]))
            continue
        expr = parse_size(size)
        found.append(int(expr.subs({s: values[str(s)] for s in expr.free_symbols})))
    return tuple(found)
