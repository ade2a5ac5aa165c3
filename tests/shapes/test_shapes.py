"""Inferring dynamic shapes, and reading and checking the shapes a program accepts."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest
import torch
from torch.export import Dim, ExportedProgram
from torch.export.dynamic_shapes import _DerivedDim

from pytest_aoti.errors import AotiInputError, AotiUsageError
from pytest_aoti.mutation_maps import named_user_inputs
from pytest_aoti.shapes.formatting import format_dynamic_shapes
from pytest_aoti.shapes.infer import infer_dynamic_shapes
from pytest_aoti.shapes.read import (
    InputSpec,
    ProgramShapes,
    SymbolRange,
    boundary_assignments,
    cap_range,
    read_program_shapes,
    shapes_from_assignment,
)
from pytest_aoti.shapes.validate import solve_sizes, validate_inputs


class BatchSeq(torch.nn.Module):
    """``x`` and ``y`` must share their first axis; ``x``'s second axis is free."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=1)[:, :3] + y


class Derived(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return x.sum() + y.sum() + z.sum()


class Ranged(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor, n: int) -> torch.Tensor:
        return x.sum(dim=1) + y * n


class Nested(torch.nn.Module):
    def forward(self, x: torch.Tensor, xs: list[torch.Tensor], scale: float = 1.0) -> torch.Tensor:
        return x.sum() + xs[0].sum() * scale + xs[1].sum()


def batch_seq_samples() -> Samples:
    return [
        ((torch.randn(batch, seq, 4),), {"y": torch.randn(batch, 3)})
        for batch, seq in [(2, 5), (3, 7), (4, 6)]
    ]


Samples = list[tuple[tuple[Any, ...], dict[str, Any]]]


def derived_samples(sizes: tuple[int, ...] = (2, 3, 5)) -> Samples:
    return [((torch.randn(2 * d, 3), torch.randn(d, 3), torch.randn(d + 1)), {}) for d in sizes]


def describe(spec: Any) -> Any:
    """``spec`` as plain data, so that two specs built from different Dim objects compare."""
    if isinstance(spec, _DerivedDim):
        offset = int(spec.fn(0))
        return ("derived", spec.root.__name__, int(spec.fn(1)) - offset, offset)
    if isinstance(spec, Dim):
        return ("dim", spec.__name__, int(spec.min), str(spec.max))
    if isinstance(spec, dict):
        return {key: describe(value) for key, value in spec.items()}
    if isinstance(spec, (list, tuple)):
        return type(spec)(describe(value) for value in spec)
    return repr(spec)


def run_source(source: str) -> Any:
    namespace: dict[str, Any] = {"Dim": Dim}
    exec(source, namespace)
    return namespace["dynamic_shapes"]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def batch_seq_spec() -> Any:
    return infer_dynamic_shapes(BatchSeq(), batch_seq_samples())


@pytest.fixture(scope="module")
def batch_seq_program(batch_seq_spec: Any) -> ExportedProgram:
    args, kwargs = batch_seq_samples()[0]
    return torch.export.export(BatchSeq(), args, kwargs, dynamic_shapes=batch_seq_spec)


@pytest.fixture(scope="module")
def ranged_program() -> ExportedProgram:
    b = Dim("b", min=2, max=512)
    return torch.export.export(
        Ranged(),
        (torch.randn(4, 8), torch.randn(4), 3),
        dynamic_shapes={"x": {0: b, 1: Dim.STATIC}, "y": {0: b}, "n": None},
    )


@pytest.fixture(scope="module")
def derived_program() -> ExportedProgram:
    d = Dim("d", min=2, max=100)
    return torch.export.export(
        Derived(),
        (torch.randn(6, 3), torch.randn(3, 3), torch.randn(4)),
        dynamic_shapes=({0: 2 * d, 1: Dim.STATIC}, {0: d, 1: Dim.STATIC}, {0: d + 1}),
    )


@pytest.fixture(scope="module")
def auto_program() -> ExportedProgram:
    return torch.export.export(
        Derived(),
        (torch.randn(6, 3), torch.randn(3, 3), torch.randn(4)),
        dynamic_shapes=({0: Dim.AUTO, 1: Dim.STATIC}, None, None),
    )


def symbol_of(shapes: ProgramShapes, name: str, axis: int) -> str:
    size = shapes.input(name).shape[axis]
    assert isinstance(size, str)
    return size


# --------------------------------------------------------------------------- inference


def test_infers_a_shared_batch_and_an_independent_sequence(batch_seq_spec: Any) -> None:
    x, y = batch_seq_spec["x"], batch_seq_spec["y"]
    assert set(batch_seq_spec) == {"x", "y"}
    assert isinstance(x[0], Dim) and x[0] is y[0]
    assert x[0].__name__ == "batch"
    assert isinstance(x[1], Dim) and x[1] is not x[0]
    assert x[1].__name__ == "x_dim1"
    assert x[2] is Dim.STATIC and y[1] is Dim.STATIC
    assert (x[0].min, x[1].min) == (2, 2)


def test_inferred_spec_exports(batch_seq_program: ExportedProgram) -> None:
    shapes = read_program_shapes(batch_seq_program)
    batch, seq = symbol_of(shapes, "x", 0), symbol_of(shapes, "x", 1)
    assert shapes.input("x").shape == (batch, seq, 4)
    assert shapes.input("y").shape == (batch, 3)
    assert batch != seq


def test_tuple_spec_without_kwargs() -> None:
    samples = [((args[0], kwargs["y"]), {}) for args, kwargs in batch_seq_samples()]
    spec = infer_dynamic_shapes(BatchSeq(), samples)
    assert isinstance(spec, tuple) and len(spec) == 2
    assert spec[0][0] is spec[1][0]


def test_infers_derived_dims() -> None:
    spec = infer_dynamic_shapes(Derived(), derived_samples())
    x, y, z = (axes[0] for axes in spec)
    assert isinstance(x, _DerivedDim) and isinstance(z, _DerivedDim)
    assert x.root is y and z.root is y
    assert (x.fn(1) - x.fn(0), x.fn(0)) == (2, 0)
    assert (z.fn(1) - z.fn(0), z.fn(0)) == (1, 1)
    assert spec[0][1] is Dim.STATIC
    program = torch.export.export(Derived(), derived_samples()[1][0], dynamic_shapes=spec)
    shapes = read_program_shapes(program)
    d = symbol_of(shapes, "y", 0)
    assert shapes.input("x").shape == (f"2*{d}", 3)
    assert shapes.input("z").shape == (f"{d} + 1",)


def test_relation_must_hold_in_every_sample() -> None:
    samples = derived_samples()
    # z is d + 1 in the first two samples only.
    samples[2] = ((samples[2][0][0], samples[2][0][1], torch.randn(9)), {})
    spec = infer_dynamic_shapes(Derived(), samples)
    assert not isinstance(spec[2][0], _DerivedDim)
    assert spec[2][0].__name__ == "z_dim0"


def test_nested_and_non_tensor_leaves() -> None:
    samples = [
        ((torch.randn(n, 2), [torch.randn(n), torch.randn(5)]), {"scale": 2.0}) for n in (3, 4)
    ]
    spec = infer_dynamic_shapes(Nested(), samples)
    assert spec["scale"] is None
    assert isinstance(spec["xs"], list) and spec["xs"][1] == {0: Dim.STATIC}
    assert spec["xs"][0][0] is spec["x"][0] and spec["x"][0].__name__ == "batch"


def test_size_one_samples_get_auto() -> None:
    samples = [((torch.randn(n, 2), torch.randn(n, 2)), {}) for n in (1, 4)]
    spec = infer_dynamic_shapes(BatchSeq(), samples)
    assert spec[0][0] is Dim.AUTO and spec[1][0] is Dim.AUTO
    assert spec[0][1] is Dim.STATIC


def test_max_size() -> None:
    spec = infer_dynamic_shapes(Derived(), derived_samples(), max_size=64)
    assert spec[1][0].max == 64
    with pytest.raises(AotiUsageError, match="max_size=4 is below a sample size of 5"):
        infer_dynamic_shapes(Derived(), derived_samples(), max_size=4)


GOOD = ((torch.randn(2, 3), torch.randn(2, 3)), {})


@pytest.mark.parametrize(
    ("samples", "message"),
    [
        ([GOOD], "at least 2 samples"),
        (
            [GOOD, ((torch.randn(3, 3),), {"y": [torch.randn(3, 3)]})],
            "sample 1 has a different input structure",
        ),
        (
            [GOOD, ((torch.randn(3, 3, 1), torch.randn(3, 3)), {})],
            "input 'x' has rank 3 in sample 1 but rank 2 in sample 0",
        ),
        (
            [GOOD, ((torch.randn(3, 3), torch.ones(3, 3, dtype=torch.int64)), {})],
            "input 'y' has dtype torch.int64 in sample 1 but torch.float32 in sample 0",
        ),
        (
            [GOOD, ((torch.randn(3, 3), 4), {})],
            "input 'y' is a Tensor in sample 0 but a int in sample 1",
        ),
        ([((torch.randn(2, 3),), {}), ((torch.randn(3, 3),), {})], "sample 0 does not fit forward"),
        ([(torch.randn(2, 3), {}), (torch.randn(3, 3), {})], "sample 0 must be a pair"),
    ],
)
def test_bad_samples(samples: Samples, message: str) -> None:
    with pytest.raises(AotiUsageError, match=re.escape(message)):
        infer_dynamic_shapes(BatchSeq(), samples)


def test_names_are_deterministic() -> None:
    first = format_dynamic_shapes(infer_dynamic_shapes(Derived(), derived_samples()))
    second = format_dynamic_shapes(infer_dynamic_shapes(Derived(), derived_samples((3, 4, 9))))
    assert first == second


# --------------------------------------------------------------------------- formatting


def test_format_round_trips(batch_seq_spec: Any) -> None:
    source = format_dynamic_shapes(batch_seq_spec)
    assert source.splitlines()[:2] == [
        'batch = Dim("batch", min=2)',
        'x_dim1 = Dim("x_dim1", min=2)',
    ]
    rebuilt = run_source(source)
    assert describe(rebuilt) == describe(batch_seq_spec)
    assert rebuilt["x"][0] is rebuilt["y"][0]


def test_format_derived_and_tuple_form() -> None:
    spec = infer_dynamic_shapes(Derived(), derived_samples(), max_size=64)
    source = format_dynamic_shapes(spec)
    assert source == (
        'y_dim0 = Dim("y_dim0", min=2, max=64)\n'
        "dynamic_shapes = (\n"
        "    {0: 2 * y_dim0, 1: Dim.STATIC},\n"
        "    {0: y_dim0, 1: Dim.STATIC},\n"
        "    {0: y_dim0 + 1},\n"
        ")"
    )
    assert describe(run_source(source)) == describe(spec)


def test_format_hints_and_nesting() -> None:
    spec = {"x": {0: Dim.AUTO, 1: Dim.DYNAMIC(max=8)}, "xs": [({0: Dim.STATIC},), None], "n": None}
    source = format_dynamic_shapes(spec)
    assert source.count("\n") == 4  # no Dim definitions, one line per top-level entry
    assert describe(run_source(source)) == describe(spec)


# --------------------------------------------------------------------------- reading


def test_reads_a_bounded_dim(ranged_program: ExportedProgram) -> None:
    shapes = read_program_shapes(ranged_program)
    b = symbol_of(shapes, "x", 0)
    assert shapes.inputs == (
        InputSpec("x", (b, 8), torch.float32, torch.device("cpu"), "contiguous", (8, 1)),
        InputSpec("y", (b,), torch.float32, torch.device("cpu"), "contiguous", (1,)),
    )
    assert shapes.symbols == {b: SymbolRange(b, 2, 512)}
    assert shapes.constants == {"n": 3}
    assert shapes.dim_range("x", 0) == (2, 512)
    assert shapes.dim_range("x", 1) == (8, 8)


def test_reads_derived_dims(derived_program: ExportedProgram) -> None:
    shapes = read_program_shapes(derived_program)
    d = symbol_of(shapes, "y", 0)
    assert [spec.shape for spec in shapes.inputs] == [(f"2*{d}", 3), (d, 3), (f"{d} + 1",)]
    assert shapes.symbols == {d: SymbolRange(d, 2, 100)}
    assert shapes.dim_range("x", 0) == (4, 200)
    assert shapes.dim_range("z", 0) == (3, 101)


def test_reads_auto_dims_as_unbounded(auto_program: ExportedProgram) -> None:
    shapes = read_program_shapes(auto_program)
    s = symbol_of(shapes, "x", 0)
    assert shapes.symbols == {s: SymbolRange(s, 2, None)}
    assert shapes.dim_range("x", 0) == (2, None)
    assert shapes.input("y").shape == (3, 3)


def test_reads_the_decomposed_program(derived_program: ExportedProgram) -> None:
    decomposed = derived_program.run_decompositions()
    assert read_program_shapes(decomposed) == read_program_shapes(derived_program)


# --------------------------------------------------------------------------- validation


def check(program: ExportedProgram, *args: Any) -> None:
    validate_inputs(read_program_shapes(program), named_user_inputs(program, args, {}))


def test_valid_inputs_pass(
    ranged_program: ExportedProgram, derived_program: ExportedProgram
) -> None:
    check(ranged_program, torch.randn(512, 8), torch.randn(512), 3)
    check(ranged_program, torch.randn(2, 8), torch.randn(2), 3)
    check(derived_program, torch.randn(20, 3), torch.randn(10, 3), torch.randn(11))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            (torch.randn(600, 8), torch.randn(600), 3),
            "input 'x' dim 0 is 600, outside the exported range [2, 512] of symbol {b}",
        ),
        (
            (torch.randn(1, 8), torch.randn(1), 3),
            "input 'x' dim 0 is 1, outside the exported range [2, 512] of symbol {b}",
        ),
        (
            (torch.randn(4, 8, 1), torch.randn(4), 3),
            "input 'x' has rank 3 but the program needs rank 2 (shape [{b}, 8])",
        ),
        (
            (torch.randn(4, 8, dtype=torch.float64), torch.randn(4), 3),
            "input 'x' has dtype torch.float64 but the program needs torch.float32",
        ),
        (
            (torch.randn(4, 9), torch.randn(4), 3),
            "input 'x' dim 1 is 9 but the program needs 8 (static)",
        ),
        (
            (torch.randn(4, 8), torch.randn(5), 3),
            "input 'y' dim 0 is 5 but the program needs x.shape[0] = 4",
        ),
        (
            (torch.randn(4, 8), 2.0, 3),
            "input 'y' is a float but the program needs a tensor",
        ),
    ],
)
def test_invalid_inputs(
    ranged_program: ExportedProgram, args: tuple[Any, ...], message: str
) -> None:
    b = symbol_of(read_program_shapes(ranged_program), "x", 0)
    with pytest.raises(AotiInputError) as caught:
        check(ranged_program, *args)
    assert str(caught.value) == message.format(b=b)


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ((20, 9, 11), "input 'y' dim 0 is 9 but the program needs x.shape[0]/2 = 10"),
        ((20, 10, 12), "input 'z' dim 0 is 12 but the program needs x.shape[0]/2 + 1 = 11"),
        ((7, 3, 4), "input 'x' dim 0 is 7 but the program needs a size of the form 2*{d}"),
        (
            (202, 101, 102),
            "input 'x' dim 0 is 202 = 2*{d} with {d} = 101, "
            "outside the exported range [2, 100] of symbol {d}",
        ),
    ],
)
def test_inconsistent_derived_dims(
    derived_program: ExportedProgram, sizes: tuple[int, int, int], message: str
) -> None:
    d = symbol_of(read_program_shapes(derived_program), "y", 0)
    x, y, z = sizes
    with pytest.raises(AotiInputError) as caught:
        check(derived_program, torch.randn(x, 3), torch.randn(y, 3), torch.randn(z))
    assert str(caught.value) == message.format(d=d)


def test_solve_sizes(derived_program: ExportedProgram) -> None:
    shapes = read_program_shapes(derived_program)
    d = symbol_of(shapes, "y", 0)
    assert solve_sizes(shapes, {"x": (8, 3), "y": (4, 3), "z": (5,)}) == {d: 4}
    # A symbol is solved from a derived dim too, and unlisted inputs are not checked.
    assert solve_sizes(shapes, {"z": (8,)}) == {d: 7}


# --------------------------------------------------------------------------- boundaries


def test_cap_range() -> None:
    assert cap_range(SymbolRange("s", 2, None), 64) == (2, 64)
    assert cap_range(SymbolRange("s", 2, 10), 64) == (2, 10)
    assert cap_range(SymbolRange("s", 2, 10**9), 64) == (2, 64)
    assert cap_range(SymbolRange("s", 100, None), 64) == (100, 100)


def test_boundary_assignments_of_one_symbol(ranged_program: ExportedProgram) -> None:
    shapes = read_program_shapes(ranged_program)
    b = symbol_of(shapes, "x", 0)
    # a declared maximum is a boundary even above max_dim
    assert boundary_assignments(shapes, 64) == [{b: 2}, {b: 512}]
    assert boundary_assignments(shapes, 1000) == [{b: 2}, {b: 512}]


def test_boundary_assignments_of_two_symbols(batch_seq_program: ExportedProgram) -> None:
    shapes = read_program_shapes(batch_seq_program)
    b, s = symbol_of(shapes, "x", 0), symbol_of(shapes, "x", 1)
    assert boundary_assignments(shapes, 16) == [
        {b: 2, s: 2},
        {b: 16, s: 16},
        {b: 2, s: 16},
        {b: 16, s: 2},
    ]


def test_boundary_assignments_drop_dims_out_of_range() -> None:
    shapes = ProgramShapes(
        inputs=(InputSpec("x", ("s0 - s1", 2), torch.float32, torch.device("cpu")),),
        symbols={"s0": SymbolRange("s0", 2, 100), "s1": SymbolRange("s1", 2, 100)},
    )
    assert boundary_assignments(shapes, 64) == [
        {"s0": 2, "s1": 2},
        {"s0": 100, "s1": 100},
        {"s0": 100, "s1": 2},
    ]


def test_unbounded_boundary_is_capped_at_max_dim() -> None:
    shapes = ProgramShapes(
        inputs=(InputSpec("x", ("s0", 2), torch.float32, torch.device("cpu")),),
        symbols={"s0": SymbolRange("s0", 2, None)},
    )
    assert boundary_assignments(shapes, 64) == [{"s0": 2}, {"s0": 64}]


def test_exported_constant_must_be_passed_unchanged(ranged_program: ExportedProgram) -> None:
    with pytest.raises(
        AotiInputError,
        match=r"^input 'n' is 7 but the program was exported with 3: the engine has 3 built in "
        r"and ignores the value passed; export again with this value, or pass it as a tensor$",
    ):
        check(ranged_program, torch.randn(4, 8), torch.randn(4), 7)


def test_layout_the_engine_reads_is_required(ranged_program: ExportedProgram) -> None:
    transposed = torch.randn(8, 4).t()
    with pytest.raises(
        AotiInputError, match=r"^input 'x' is not contiguous .*pass x.contiguous\(\)"
    ):
        check(ranged_program, transposed, torch.randn(4), 3)


def test_channels_last_layout_is_read_and_required() -> None:
    class Conv(torch.nn.Module):
        def forward(self, images: torch.Tensor) -> torch.Tensor:
            return images * 2

    example = torch.randn(2, 3, 4, 4).contiguous(memory_format=torch.channels_last)
    program = torch.export.export(Conv(), (example,))
    shapes = read_program_shapes(program)
    assert shapes.inputs[0].layout == "channels_last"
    validate_inputs(shapes, {"images": example.clone()})
    with pytest.raises(AotiInputError, match="is not channels_last"):
        validate_inputs(shapes, {"images": example.contiguous()})


def test_shapes_from_assignment(derived_program: ExportedProgram) -> None:
    shapes = read_program_shapes(derived_program)
    d = symbol_of(shapes, "y", 0)
    assert shapes_from_assignment(shapes, {d: 5}) == {"x": (10, 3), "y": (5, 3), "z": (6,)}


def test_generated_inputs_take_the_exported_strides_at_their_shape() -> None:
    """A sliced example (strides (16, 2)) or an expanded one (stride 0) exported with a
    dynamic batch: each generated input has the exported strides at its own shape, as the
    engine reads it, and an expanded dim stays expanded."""
    from torch.export import Dim

    from pytest_aoti.strategies import InputBuilder

    class Affine(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x * 2 + y

    x, y = torch.randn(4, 16)[:, ::2], torch.randn(1, 8).expand(4, 8)
    batch = Dim("batch", min=2, max=16)
    program = torch.export.export(Affine(), (x, y), dynamic_shapes=({0: batch}, {0: batch}))
    builder = InputBuilder(program, like=(x, y))
    (symbol,) = builder.shapes.symbols
    (new_x, new_y), _ = builder.build({symbol: 6}, seed=1)
    assert new_x.shape == (6, 8) and new_x.stride() == (16, 2)
    assert new_y.shape == (6, 8) and new_y.stride() == (0, 1)
    assert torch.equal(new_y[0], new_y[5])


def test_the_input_builder_loads_without_hypothesis() -> None:
    # a check with no dynamic dims builds its inputs here and draws no shape: Hypothesis
    # (a tenth of a second to import) loads only where shapes are drawn
    code = (
        "import sys\n"
        "from pytest_aoti.shapes.generation import InputBuilder\n"
        "assert 'hypothesis' not in sys.modules, sorted(m for m in sys.modules if 'hypo' in m)\n"
        "from pytest_aoti.shapes.generation import inputs_for\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
