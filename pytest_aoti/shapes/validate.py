"""Checking inputs against the shapes, dtypes, devices and layouts a program accepts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sympy
import torch

from pytest_aoti.errors import AotiInputError
from pytest_aoti.shapes.read import InputSpec, ProgramShapes, SymbolRange, format_range, parse_size


def solve_sizes(shapes: ProgramShapes, named_shapes: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """Solve the shape symbols from input shapes; raise ``AotiInputError`` naming the input and
    dim for a rank or static size that differs, a symbol out of range, a derived size that does
    not fit, or one symbol with two values. Missing inputs are not checked."""
    return _Solver(shapes).solve(named_shapes)


def validate_inputs(shapes: ProgramShapes, named_inputs: Mapping[str, Any]) -> None:
    """Check tensor inputs (by name): type, rank, dtype, device and every dim (AotiInputError)."""
    named_shapes: dict[str, tuple[int, ...]] = {}
    for spec in shapes.inputs:
        if spec.name not in named_inputs:
            raise AotiInputError(f"input '{spec.name}' is missing")
        value = named_inputs[spec.name]
        if not isinstance(value, torch.Tensor):
            raise AotiInputError(
                f"input '{spec.name}' is a {type(value).__name__} but the program needs a tensor"
            )
        if value.dim() != len(spec.shape):
            raise AotiInputError(_rank_message(shapes, spec, value.dim()))
        if value.dtype != spec.dtype:
            raise AotiInputError(
                f"input '{spec.name}' has dtype {value.dtype} but the program needs {spec.dtype}"
            )
        # the type decides the kernels; the index follows the engine (validate_device_index)
        if value.device.type != spec.device.type:
            raise AotiInputError(
                f"input '{spec.name}' is on {value.device} but the program needs {spec.device.type}"
            )
        named_shapes[spec.name] = tuple(value.shape)
    solve_sizes(shapes, named_shapes)
    for spec in shapes.inputs:
        _check_layout(spec, named_inputs[spec.name])
    for name, exported in shapes.constants.items():
        if name in named_inputs and not _same_constant(named_inputs[name], exported):
            raise AotiInputError(
                f"input '{name}' is {named_inputs[name]!r} but the program was exported with "
                f"{exported!r}: the engine has {exported!r} built in and ignores the value "
                "passed; export again with this value, or pass it as a tensor"
            )


def _check_layout(spec: InputSpec, value: torch.Tensor) -> None:
    if spec.layout == "contiguous" and not value.is_contiguous():
        raise AotiInputError(
            f"input '{spec.name}' is not contiguous (strides {tuple(value.stride())}) but the "
            f"program reads it as contiguous; pass {spec.name}.contiguous()"
        )
    if spec.layout == "channels_last" and not value.is_contiguous(
        memory_format=torch.channels_last
    ):
        raise AotiInputError(
            f"input '{spec.name}' is not channels_last but the program reads it so; pass "
            f"{spec.name}.contiguous(memory_format=torch.channels_last)"
        )


def _same_constant(given: Any, exported: Any) -> bool:
    try:
        return bool(given == exported) and type(given) is type(exported)
    except Exception:
        return False


def _rank_message(shapes: ProgramShapes, spec: InputSpec, rank: int) -> str:
    shape = ", ".join(shapes.display(size) for size in spec.shape)
    return (
        f"input '{spec.name}' has rank {rank} but the program needs rank {len(spec.shape)} "
        f"(shape [{shape}])"
    )


class _Solver:
    """Binds symbols dim by dim, remembering which dim set each so errors can say so."""

    def __init__(self, shapes: ProgramShapes) -> None:
        self.shapes = shapes
        self.values: dict[str, int] = {}
        self.sources: dict[str, Any] = {}  # symbol -> sympy expr of the dim that set it

    def solve(self, named_shapes: Mapping[str, Sequence[int]]) -> dict[str, int]:
        pending: list[tuple[str, int, int, sympy.Expr]] = []
        for spec in self.shapes.inputs:
            if spec.name not in named_shapes:
                continue
            sizes = [int(size) for size in named_shapes[spec.name]]
            if len(sizes) != len(spec.shape):
                raise AotiInputError(_rank_message(self.shapes, spec, len(sizes)))
            for axis, (expected, size) in enumerate(zip(spec.shape, sizes)):
                if isinstance(expected, int):
                    if size != expected:
                        raise AotiInputError(
                            f"input '{spec.name}' dim {axis} is {size} "
                            f"but the program needs {expected} (static)"
                        )
                    continue
                pending.append((spec.name, axis, size, parse_size(expected)))
        # Dims over several unknown symbols wait until other dims have bound them.
        while pending:
            waiting = [dim for dim in pending if not self._bind(*dim)]
            if len(waiting) == len(pending):
                break  # not solvable from these shapes; nothing more can be checked
            pending = waiting
        return dict(self.values)

    def _bind(self, name: str, axis: int, size: int, expr: sympy.Expr) -> bool:
        """Check or solve one dim; False when it has more than one unknown symbol."""
        unknown = [s for s in expr.free_symbols if str(s) not in self.values]
        if not unknown:
            self._check_known(name, axis, size, expr)
            return True
        if len(unknown) > 1:
            return False
        symbol = unknown[0]
        value = self._solve_for(name, axis, size, expr, symbol)
        symbol_range = self.shapes.symbols.get(str(symbol), SymbolRange(str(symbol), 0, None))
        if value < symbol_range.min or (symbol_range.max is not None and value > symbol_range.max):
            shown = self.shapes.display(symbol)
            via = "" if expr == symbol else f" = {self.shapes.display(expr)} with {shown} = {value}"
            raise AotiInputError(
                f"input '{name}' dim {axis} is {size}{via}, outside the exported range "
                f"{format_range(symbol_range.min, symbol_range.max)} of "
                f"{self.shapes.symbol_label(symbol)}"
            )
        self.values[str(symbol)] = value
        self.sources[str(symbol)] = self._source(name, axis, expr, symbol)
        return True

    def _solve_for(
        self, name: str, axis: int, size: int, expr: sympy.Expr, symbol: sympy.Symbol
    ) -> int:
        known = expr.subs({s: self.values[str(s)] for s in expr.free_symbols if s != symbol})
        if known == symbol:
            return size
        poly = known.as_poly(symbol)
        if poly is not None and poly.degree() == 1:
            scale, offset = poly.all_coeffs()
            candidates = [sympy.Rational(size - offset, scale)]
        else:
            candidates = sympy.solve(sympy.Eq(known, size), symbol)
        solutions = [value for value in candidates if value.is_integer and value >= 0]
        if not solutions:
            raise AotiInputError(
                f"input '{name}' dim {axis} is {size} but the program needs a size of the "
                f"form {self._describe(expr)}"
            )
        return int(solutions[0])

    def _check_known(self, name: str, axis: int, size: int, expr: sympy.Expr) -> None:
        expected = int(expr.subs({s: self.values[str(s)] for s in expr.free_symbols}))
        if size != expected:
            raise AotiInputError(
                f"input '{name}' dim {axis} is {size} but the program needs "
                f"{self._describe(expr)} = {expected}"
            )

    def _source(self, name: str, axis: int, expr: sympy.Expr, symbol: sympy.Symbol) -> Any:
        """``symbol`` in terms of the dim that set it: ``x.shape[0]`` or ``x.shape[0]/2``."""
        where = sympy.Symbol(f"{name}.shape[{axis}]", integer=True, nonnegative=True)
        if expr == symbol:
            return where
        solutions = sympy.solve(sympy.Eq(expr, where), symbol)
        return solutions[0] if len(solutions) == 1 else symbol

    def _describe(self, expr: sympy.Expr) -> str:
        """``expr`` with each bound symbol replaced by the dim that set it."""
        sources = {s: self.sources[str(s)] for s in expr.free_symbols if str(s) in self.sources}
        return self.shapes.display(expr.subs(sources))
