"""Dynamic shapes: inferring a ``dynamic_shapes`` spec, and reading and checking the shapes
an exported program accepts.

An AOTInductor engine does not check its inputs against the ranges it was exported for:
one exported with ``max=512`` runs a sequence of 600, one with ``min=2`` runs a sequence
of 1, and both return whatever the kernels compute. Inputs are therefore checked here,
against what the exported program itself records (``range_constraints`` and the symbolic
sizes of its placeholders), before an engine runs.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import json
import keyword
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from pytest_aoti.compiling.signature import read_signature_names
from pytest_aoti.errors import AotiInputError, AotiUsageError

if TYPE_CHECKING:
    import sympy
    from torch.export import ExportedProgram

Sample = tuple[tuple[Any, ...], dict[str, Any]]

# The smallest size an inferred Dim allows. Export traces with the sample's sizes as
# hints and assumes a dynamic size is neither 0 nor 1 (broadcasting, ``if n == 1``
# branches): a program exported with ``min=1`` accepts size 1 without having traced the
# size-1 path, so it may compute the wrong thing. 2 is also what ``Dim.AUTO`` gets.
MIN_DYNAMIC_SIZE = 2


# --------------------------------------------------------------------------- inference


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
    module: torch.nn.Module,
    samples: Sequence[Sample],
    *,
    max_size: int | None = None,
) -> Any:
    """Infer a ``torch.export`` ``dynamic_shapes`` spec from two or more input samples.

    ``samples`` holds ``(args, kwargs)`` pairs of the same structure and different sizes.
    An axis whose size changes across samples is dynamic; axes with identical sizes in
    every sample share one ``Dim``; an axis that is ``k`` times, or ``c`` more than,
    another dynamic axis in every sample becomes the derived dim ``k * d`` or ``d + c``.
    Axes that never change are ``Dim.STATIC``, non-tensor leaves ``None``.

    Dims get ``min=2`` (see ``MIN_DYNAMIC_SIZE``) and no maximum unless ``max_size`` is
    given. An axis that is 0 or 1 in some sample cannot be exported as a named Dim from
    that sample (export specializes it), so it and the axes tied to it get ``Dim.AUTO``.

    The spec is a tuple matching ``args`` when no sample has keyword arguments, else a
    dict keyed by the parameter names of ``module.forward``.
    """
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

    sizes = _axis_sizes(leaves)
    clusters = _cluster_axes(sizes)
    dims = _make_dims(clusters, names, max_size)

    import torch.utils._pytree as pytree

    leaf_specs: list[Any] = []
    for leaf_index, leaf in enumerate(leaves[0]):
        if not isinstance(leaf, torch.Tensor):
            leaf_specs.append(None)
            continue
        leaf_specs.append(
            {
                axis: dims.get(_Axis(leaf_index, axis), torch.export.Dim.STATIC)
                for axis in range(leaf.dim())
            }
        )
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
    """The sample keyed by parameter name, in signature order."""
    args, kwargs = sample
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as error:
        raise AotiUsageError(f"sample {index} does not fit forward{signature}: {error}") from None
    return dict(bound.arguments)


def _leaf_names(arguments: dict[str, Any]) -> list[str]:
    """Leaf names as torch.export gives user inputs: ``x``, ``xs_0``, ``d_key``."""
    import torch.utils._pytree as pytree

    paths_and_leaves, _ = pytree.tree_flatten_with_path(arguments)
    return _unique([_path_name(path) for path, _ in paths_and_leaves])


def _flatten_samples(trees: list[Any]) -> tuple[list[list[Any]], Any]:
    """Each sample's leaves and the common tree structure."""
    import torch.utils._pytree as pytree

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
    result = []
    for name in names:
        candidate = name
        for suffix in itertools.count(2):
            if candidate not in seen:
                break
            candidate = f"{name}_{suffix}"
        seen.add(candidate)
        result.append(candidate)
    return result


def _check_leaves(names: list[str], leaves: list[list[Any]]) -> None:
    """Every sample must hold tensors at the same places, of the same rank and dtype."""
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
    """Group dynamic axes under roots, smallest sizes first, so that relations read
    ``k * d`` and ``d + c`` with positive ``k`` and ``c`` as Dim requires."""
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
    from torch.export import Dim

    dims: dict[_Axis, Any] = {}
    used: set[str] = set()
    for cluster in clusters:
        if min(cluster.root) < MIN_DYNAMIC_SIZE:
            # Exporting from the sample where this axis is 0 or 1 specializes it, which a
            # named Dim turns into an error; AUTO lets export decide.
            for axis, _, _ in cluster.members:
                dims[axis] = Dim.AUTO
            continue
        largest = max(cluster.root)
        if max_size is not None and max_size < largest:
            raise AotiUsageError(f"max_size={max_size} is below a sample size of {largest}")
        name = _dim_name(cluster, names, used)
        used.add(name)
        root = Dim(name, min=MIN_DYNAMIC_SIZE, max=max_size)
        for axis, scale, offset in cluster.members:
            dims[axis] = root if scale == 1 and offset == 0 else root * scale + offset
    return dims


def _dim_name(cluster: _Cluster, names: list[str], used: set[str]) -> str:
    roots = [axis for axis, scale, offset in cluster.members if scale == 1 and offset == 0]
    first_axes = {axis.leaf for axis in roots if axis.axis == 0}
    if len(first_axes) > 1:
        base = "batch"
    else:
        base = f"{names[roots[0].leaf]}_dim{roots[0].axis}"
    if keyword.iskeyword(base) or base == "Dim":
        base = f"{base}_"
    name = base
    for suffix in itertools.count(2):
        if name not in used:
            return name
        name = f"{base}_{suffix}"
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------- formatting


def format_dynamic_shapes(spec: Any) -> str:
    """Python source for ``spec``: one ``name = Dim(...)`` line per named dim, then
    ``dynamic_shapes = ...``. It runs wherever ``Dim`` (``torch.export.Dim``) is in scope.
    """
    roots: dict[str, Any] = {}
    for dim in _walk_dims(spec):
        root = getattr(dim, "root", dim)
        roots.setdefault(root.__name__, root)
    lines = [_format_root(root) for root in roots.values()]
    lines.append(f"dynamic_shapes = {_format_spec(spec, top=True)}")
    return "\n".join(lines)


def _walk_dims(spec: Any) -> Iterator[Any]:
    from torch.export import Dim

    if isinstance(spec, Dim):
        yield spec
    elif isinstance(spec, Mapping):
        for value in spec.values():
            yield from _walk_dims(value)
    elif isinstance(spec, (list, tuple)):
        for value in spec:
            yield from _walk_dims(value)


def _format_root(root: Any) -> str:
    from torch.utils._sympy.numbers import int_oo

    bounds = [f"min={int(root.min)}"]
    if root.max is not int_oo and root.max is not None:
        bounds.append(f"max={int(root.max)}")
    return f'{root.__name__} = Dim("{root.__name__}", {", ".join(bounds)})'


def _format_spec(spec: Any, top: bool = False) -> str:
    from torch.export import Dim
    from torch.export.dynamic_shapes import _DerivedDim, _DimHint

    if isinstance(spec, _DerivedDim):
        return _format_derived(spec)
    if isinstance(spec, Dim):
        return str(spec.__name__)
    if isinstance(spec, _DimHint):
        text = f"Dim.{spec.type.name}"
        pairs = (("min", spec.min), ("max", spec.max))
        bounds = [f"{key}={value}" for key, value in pairs if value is not None]
        return f"{text}({', '.join(bounds)})" if bounds else text
    if isinstance(spec, Mapping):
        items = [f"{_format_key(key)}: {_format_spec(value)}" for key, value in spec.items()]
        return _join(items, "{", "}", top)
    if isinstance(spec, tuple):
        items = [_format_spec(value) for value in spec]
        if len(items) == 1 and not top:
            return f"({items[0]},)"
        return _join(items, "(", ")", top)
    if isinstance(spec, list):
        return _join([_format_spec(value) for value in spec], "[", "]", top)
    return repr(spec)  # None or a static int


def _format_derived(dim: Any) -> str:
    # A derived Dim is ``scale * root + offset``; torch keeps it as a lambda.
    offset = int(dim.fn(0))
    scale = int(dim.fn(1)) - offset
    text = dim.root.__name__ if scale == 1 else f"{scale} * {dim.root.__name__}"
    if offset > 0:
        text += f" + {offset}"
    elif offset < 0:
        text += f" - {-offset}"
    return text


def _format_key(key: Any) -> str:
    return json.dumps(key) if isinstance(key, str) else repr(key)


def _join(items: list[str], open_: str, close: str, top: bool) -> str:
    if top and items:
        body = "".join(f"    {item},\n" for item in items)
        return f"{open_}\n{body}{close}"
    return f"{open_}{', '.join(items)}{close}"


# --------------------------------------------------------------------------- reading


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
    """Memory layout the engine was compiled for: ``contiguous``, ``channels_last`` or
    ``any`` (another layout, not checked). An AOTI engine reads its inputs with the
    exported strides, so a tensor in another layout gives silently wrong results."""


@dataclass(frozen=True)
class ProgramShapes:
    """The tensor inputs an exported program accepts, as plain data."""

    inputs: tuple[InputSpec, ...]
    """Tensor user inputs, in signature order."""
    symbols: dict[str, SymbolRange]
    """Free symbols of the input shapes, in order of first appearance, and their ranges."""
    constants: dict[str, Any] = field(default_factory=dict)
    """Non-tensor user inputs and the value they were exported with: the engine ignores
    what a caller passes for them and uses that value."""
    names: dict[str, str] = field(default_factory=dict)
    """Display name of each symbol the user named: ``{"s77": "batch"}`` for a symbol that
    comes from ``Dim("batch")`` (see :func:`name_symbols`). Symbols of ``Dim.AUTO`` and
    other unnamed dims keep torch's name. Only messages use these names."""

    def input(self, name: str) -> InputSpec:
        """The input called ``name``."""
        for spec in self.inputs:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def dim_range(self, input_name: str, axis: int) -> tuple[int, int | None]:
        """Allowed size range of one dim; ``None`` as the maximum means unbounded."""
        return _expr_range(self, self.input(input_name).shape[axis])

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


def read_program_shapes(program: ExportedProgram) -> ProgramShapes:
    """Read the shapes ``program`` accepts from its placeholders and ``range_constraints``.

    Works on the program ``torch.export.export`` returns and on a decomposed one.
    """
    names = set(read_signature_names(program))
    inputs: list[InputSpec] = []
    free: dict[str, Any] = {}
    for node in program.graph.nodes:
        if node.op != "placeholder" or node.name not in names:
            continue
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor):
            continue  # constant user inputs are read from the signature below
        shape: list[int | str] = []
        for size in value.shape:
            if isinstance(size, int):
                shape.append(size)
                continue
            expr = size.node.expr
            if expr.is_number:
                shape.append(int(expr))
                continue
            shape.append(str(expr))
            for symbol in sorted(expr.free_symbols, key=str):
                free.setdefault(str(symbol), symbol)
        inputs.append(InputSpec(node.name, tuple(shape), value.dtype, value.device, _layout(value)))
    ranges = {str(key): value for key, value in program.range_constraints.items()}
    symbols = {name: _symbol_range(name, ranges.get(name)) for name in free}
    return ProgramShapes(inputs=tuple(inputs), symbols=symbols, constants=_constants(program))


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
    from torch.export.graph_signature import ConstantArgument, InputKind

    return {
        spec.arg.name: spec.arg.value
        for spec in program.graph_signature.input_specs
        if spec.kind == InputKind.USER_INPUT and isinstance(spec.arg, ConstantArgument)
    }


def _symbol_range(name: str, value_range: Any) -> SymbolRange:
    if value_range is None:
        return SymbolRange(name, 0, None)
    return SymbolRange(name, max(0, _finite(value_range.lower) or 0), _finite(value_range.upper))


def _finite(bound: Any) -> int | None:
    """``bound`` as an int, or None for infinities (``int_oo`` claims ``is_finite``)."""
    import sympy

    if isinstance(bound, (int, sympy.Integer)):
        return int(bound)
    return None


@functools.lru_cache(maxsize=1024)
def _parse(text: str) -> sympy.Expr:
    """The sympy expression of a size's text, over integer symbols."""
    import sympy
    from torch.utils._sympy import functions

    names = set(re.findall(r"[A-Za-z_]\w*", text))
    local = {name: getattr(functions, name) for name in names if hasattr(functions, name)}
    local.update(
        {name: sympy.Symbol(name, integer=True, nonnegative=True) for name in names - set(local)}
    )
    return sympy.sympify(text, locals=local)


def _expr_range(shapes: ProgramShapes, size: int | str) -> tuple[int, int | None]:
    if isinstance(size, int):
        return size, size
    import sympy
    from torch.utils._sympy.numbers import int_oo
    from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

    expr = _parse(size)
    ranges = {}
    for symbol in expr.free_symbols:
        symbol_range = shapes.symbols.get(str(symbol), SymbolRange(str(symbol), 0, None))
        upper = int_oo if symbol_range.max is None else symbol_range.max
        ranges[symbol] = ValueRanges(sympy.Integer(symbol_range.min), upper)
    bounds = bound_sympy(expr, ranges)
    return max(0, _finite(bounds.lower) or 0), _finite(bounds.upper)


# --------------------------------------------------------------------------- validation


def solve_sizes(shapes: ProgramShapes, named_shapes: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """Solve the program's shape symbols from concrete input shapes.

    Raises ``AotiInputError`` naming the input and dim when a rank or static size
    differs, a symbol would leave its exported range, a derived size does not fit its
    expression, or one symbol would take two values. Inputs missing from
    ``named_shapes`` are not checked.
    """
    return _Solver(shapes).solve(named_shapes)


def validate_inputs(shapes: ProgramShapes, named_inputs: Mapping[str, Any]) -> None:
    """Check tensor inputs against the program: type, rank, dtype, device and every dim.

    ``named_inputs`` maps user-input names to values (see ``named_user_inputs``).
    Raises ``AotiInputError`` with one line naming the input and what it needs.
    """
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
        # The device type decides which kernels the engine runs; the index follows the
        # device the engine was loaded on (see validate_device_index).
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


def _format_range(low: int, high: int | None) -> str:
    return f"[{low}, inf)" if high is None else f"[{low}, {high}]"


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
                pending.append((spec.name, axis, size, _parse(expected)))
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
                f"{_format_range(symbol_range.min, symbol_range.max)} of "
                f"{self.shapes.symbol_label(symbol)}"
            )
        self.values[str(symbol)] = value
        self.sources[str(symbol)] = self._source(name, axis, expr, symbol)
        return True

    def _solve_for(
        self, name: str, axis: int, size: int, expr: sympy.Expr, symbol: sympy.Symbol
    ) -> int:
        import sympy

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
        import sympy

        where = sympy.Symbol(f"{name}.shape[{axis}]", integer=True, nonnegative=True)
        if expr == symbol:
            return where
        solutions = sympy.solve(sympy.Eq(expr, where), symbol)
        return solutions[0] if len(solutions) == 1 else symbol

    def _describe(self, expr: sympy.Expr) -> str:
        """``expr`` with each bound symbol replaced by the dim that set it."""
        sources = {s: self.sources[str(s)] for s in expr.free_symbols if str(s) in self.sources}
        return self.shapes.display(expr.subs(sources))


# --------------------------------------------------------------------------- boundaries


def cap_range(r: SymbolRange, max_dim: int) -> tuple[int, int]:
    """``r`` as a finite range: maxima above ``max_dim`` become ``max_dim``, never below min."""
    high = max_dim if r.max is None else min(r.max, max_dim)
    return r.min, max(high, r.min)


def boundary_assignments(shapes: ProgramShapes, max_dim: int) -> list[dict[str, int]]:
    """Symbol assignments at the edges of the exported ranges.

    A declared maximum is used as it is, however far above ``max_dim`` (the sizes where
    engines go wrong include the largest); only an unbounded one is capped at ``max_dim``.
    All symbols at their minimum, all at their maximum, then each symbol at its minimum
    with the others at their maximum and at its maximum with the others at their
    minimum; duplicates and assignments that put some input dim outside its range are
    dropped.
    """
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
        for axis, size in enumerate(_evaluate(spec, values)):
            low, high = shapes.dim_range(spec.name, axis)
            if size < low or (high is not None and size > high):
                return False
    return True


def shapes_from_assignment(
    shapes: ProgramShapes, values: Mapping[str, int]
) -> dict[str, tuple[int, ...]]:
    """Concrete shape of every tensor input for one symbol assignment."""
    return {spec.name: _evaluate(spec, values) for spec in shapes.inputs}


def _evaluate(spec: InputSpec, values: Mapping[str, int]) -> tuple[int, ...]:
    sizes = []
    for size in spec.shape:
        if isinstance(size, int):
            sizes.append(size)
            continue
        expr = _parse(size)
        sizes.append(int(expr.subs({s: values[str(s)] for s in expr.free_symbols})))
    return tuple(sizes)


# --------------------------------------------------------------------------- the user's spec


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
    """The axes ``dynamic_shapes`` names, each with its example tensor.

    ``arguments`` maps the forward's parameter names to the example values, in signature
    order: what ``dynamic_shapes`` is keyed by (a dict) or ordered like (a tuple or list).
    Parts of the spec that do not fit the example's structure are left to torch, which
    reports them itself; with ``strict``, a dim beyond a tensor's rank raises
    ``AotiUsageError`` here (torch says only "list assignment index out of range").
    """
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
    """The example inputs keyed by ``module.forward``'s parameter names, as torch.export
    matches them with ``dynamic_shapes``; None when they do not bind."""
    try:
        return dict(inspect.signature(module.forward).bind(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        return None


def check_dynamic_shapes(
    module: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any], dynamic_shapes: Any
) -> None:
    """Raise ``AotiUsageError`` where ``dynamic_shapes`` names a dim an input does not have.

    Run before ``torch.export.export``, which fails on that with an ``IndexError`` that
    names neither the input nor the dim.
    """
    arguments = forward_arguments(module, args, kwargs)
    if arguments is not None:
        spec_axes(dynamic_shapes, arguments, strict=True)


def dim_label(dim: Any) -> str | None:
    """How the user wrote a spec entry that bounds a size: ``Dim('batch')``, ``2*d + 1``,
    ``Dim.DYNAMIC``; None for static sizes and entries without bounds."""
    from torch.export import Dim
    from torch.export.dynamic_shapes import _DerivedDim, _DimHint

    if isinstance(dim, _DerivedDim):
        return str(dim.__name__)
    if isinstance(dim, Dim):
        return f"Dim({dim.__name__!r})"
    if isinstance(dim, _DimHint):
        return f"Dim.{dim.type.name}"
    return None


def _dim_bounds(dim: Any) -> tuple[int, int | None] | None:
    low, high = getattr(dim, "min", None), getattr(dim, "max", None)
    if low is None and high is None:
        return None
    return _finite(low) or 0, _finite(high)


def sizes_outside_spec(
    module: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any], dynamic_shapes: Any
) -> list[str]:
    """One line per example size outside the range its ``Dim`` declares, e.g.
    ``input 'x' has size 100 at dim 0, outside Dim('batch') range [1, 64]``."""
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
                f"range {_format_range(low, high)}"
            )
    return found


def sizes_export_specializes(
    module: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any], dynamic_shapes: Any
) -> list[str]:
    """Named dims whose example size is 0 or 1, which export always specializes."""
    from torch.export.dynamic_shapes import _DimHint

    arguments = forward_arguments(module, args, kwargs)
    if arguments is None:
        return []
    axes = spec_axes(dynamic_shapes, arguments)
    return [
        f"input '{entry.path}' has size {int(entry.tensor.shape[entry.axis])} at dim "
        f"{entry.axis}, which export specializes: pass an example of size >= 2 for "
        f"{dim_label(entry.dim)}"
        for entry in axes
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
    """``shapes`` with each symbol the user named through a ``Dim`` shown by that name.

    ``dynamic_shapes``, ``args`` and ``kwargs`` are what ``program`` was exported with.
    The spec is walked alongside the inputs; where it puts ``Dim("batch")`` (or a dim
    derived from it) on an axis whose exported size holds one symbol, that symbol is
    named ``batch``. ``Dim.AUTO``, ``Dim.DYNAMIC`` and static entries name nothing.
    """
    from dataclasses import replace

    from torch.export import Dim
    from torch.export.dynamic_shapes import _DerivedDim

    from pytest_aoti.compiling.signature import named_user_inputs

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
        symbols = _parse(size).free_symbols
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
    signature = program.module_call_graph[0].signature if program.module_call_graph else None
    names = getattr(signature, "forward_arg_names", None) or []
    if len(names) < len(args):
        raise ValueError("the program does not record its parameter names")
    arguments = dict(zip(names, args))
    arguments.update((name, kwargs[name]) for name in names[len(args) :] if name in kwargs)
    arguments.update((name, value) for name, value in kwargs.items() if name not in arguments)
    return arguments
