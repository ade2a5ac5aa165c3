"""Errors that keep torch's reason and advice, point at the model's line, and say what to
change: export, decomposition and compile failures, call mismatches, named shape symbols.

Export and decomposition are cheap; one test compiles (constant outputs that do work).
"""

from __future__ import annotations

import inspect
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.export import Dim, ExportedProgram

from pytest_aoti.compiling.explain import source_frame, torch_reason
from pytest_aoti.compiling.pipeline import (
    check_constant_outputs,
    compile_package,
    decompose,
    export_module,
    load_engine,
)
from pytest_aoti.compiling.program import AotiProgram, CompiledArtifact
from pytest_aoti.errors import (
    AotiCompileError,
    AotiExportError,
    AotiInputError,
    AotiUsageError,
    user_facing,
)
from pytest_aoti.generated.check import _report
from pytest_aoti.generated.search import Generation, ShapeFailure
from pytest_aoti.mutation_maps import named_user_inputs, read_signature
from pytest_aoti.shapes.read import read_program_shapes
from pytest_aoti.shapes.validate import validate_inputs

HERE = str(Path(__file__).resolve())


def line_of(function: Any, text: str) -> int:
    """Line number in this file of the first line of ``function`` that contains ``text``."""
    lines, first = inspect.getsourcelines(function)
    return first + next(index for index, line in enumerate(lines) if text in line)


# --------------------------------------------------------------------------- models


class DataDependent(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x + 1
        return x - 1


class NeedsFour(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(2, 2, -1) if x.shape[0] == 4 else x


class Double(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class Conv1D(torch.nn.Module):
    """A layer like transformers' ``pytorch_utils.Conv1D``: the ``.view`` at its top
    fails in ``run_decompositions`` after SDPA (the GPT2 failure of AOTI-NOTES.md)."""

    def __init__(self, nf: int, nx: int) -> None:
        super().__init__()
        self.nf = nf
        self.weight = torch.nn.Parameter(torch.randn(nx, nf))
        self.bias = torch.nn.Parameter(torch.zeros(nf))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class Attention(torch.nn.Module):
    def __init__(self, channels: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.channels, self.heads = channels, heads
        self.c_attn = Conv1D(3 * channels, channels)
        self.c_proj = Conv1D(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.c_attn(x).split(self.channels, dim=2)
        shape = (*q.shape[:-1], -1, self.channels // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        out = out.transpose(1, 2).contiguous()
        out = out.reshape(*out.shape[:-2], -1).contiguous()
        return self.c_proj(out)


class Pair(torch.nn.Module):
    def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
        return xs[0] + xs[1]


class Rows(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=1) + y


class FloatOut(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, float]:
        return x + 1, 0.5


class ConstantsOut(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[Any, ...]:
        return x + 1, 3, True, None


def export_error(
    module: torch.nn.Module, *args: Any, dynamic_shapes: Any = None, **options: Any
) -> AotiExportError:
    with pytest.raises(AotiExportError) as caught:
        export_module(module, args, {}, dynamic_shapes=dynamic_shapes, options=options)
    return caught.value


# --------------------------------------------------------------------------- export


def test_data_dependent_branch_names_the_line_and_suggests_cond() -> None:
    error = export_error(DataDependent(), torch.ones(3))
    message = str(error)
    lines = message.splitlines()
    assert lines[0].startswith(
        "torch.export.export failed: Could not guard on data-dependent expression"
    )
    line = line_of(DataDependent.forward, "if x.sum() > 0")
    assert f"  at {HERE}:{line} in forward" in lines
    assert "      if x.sum() > 0:" in lines
    # torch's advice stays; its logging boilerplate goes
    assert any("guard_or_false" in text for text in lines)
    assert "TORCHDYNAMO_EXTENDED_DEBUG_CPP" not in message
    hint = lines[-1]
    assert hint.startswith("  What to try:")
    assert "torch.cond" in hint and "torch._check" in hint
    assert "strict=False" not in hint  # the export was non-strict already
    assert type(error.__cause__).__name__ == "GuardOnDataDependentSymNode"


def test_strict_data_dependent_branch_points_at_the_line_dynamo_quotes() -> None:
    error = export_error(DataDependent(), torch.ones(3), strict=True)
    lines = str(error).splitlines()
    assert lines[0] == "torch.export.export failed: Data-dependent branching"
    assert f"  at {HERE}:{line_of(DataDependent.forward, 'if x.sum()')} in forward" in lines
    assert any("Hint: Use `torch.cond` to express dynamic control flow." in x for x in lines)
    assert "torch.cond" in lines[-1]


def test_specialized_dim_repeats_torchs_suggested_fix() -> None:
    error = export_error(NeedsFour(), torch.ones(4, 3), dynamic_shapes=({0: Dim("b")},))
    message = str(error)
    assert message.startswith("torch.export.export failed: Constraints violated (b)!")
    assert "  - You marked b as dynamic but your code specialized it" in message
    assert "  Suggested fixes:\n    b = 4\n" in message
    assert message.splitlines()[-1].startswith(
        "  What to try: apply torch's suggested fix to dynamic_shapes: `b = 4`. "
        "A fix `name = <int>` means the model needs that size: declare the dim Dim.STATIC"
    )
    assert error.__cause__ is not None


def test_example_of_size_one_says_export_specializes_it() -> None:
    error = export_error(Double(), torch.ones(1, 3), dynamic_shapes=({0: Dim("batch", max=64)},))
    assert str(error).splitlines()[-1] == (
        "  What to try: input 'x' has size 1 at dim 0, which export specializes: pass an "
        "example of size >= 2 for Dim('batch') (torch's suggested `batch = 1` follows from "
        "that example)."
    )


def test_example_outside_its_dim_range_names_input_size_and_range() -> None:
    error = export_error(
        Double(), torch.ones(100, 3), dynamic_shapes=({0: Dim("batch", min=1, max=64)},)
    )
    assert str(error).splitlines() == [
        "torch.export.export failed: input 'x' has size 100 at dim 0, outside "
        "Dim('batch') range [1, 64]",
        "  torch: 100 not in range [2, 64]",
        "  What to try: pass an example whose sizes lie inside the declared ranges, or "
        "widen the Dim's min/max.",
    ]
    assert type(error.__cause__).__name__ == "ConstraintViolationError"


@pytest.mark.parametrize(
    ("module", "args", "spec", "message"),
    [
        (
            Double(),
            (torch.ones(4, 3),),
            ({5: Dim("b")},),
            "dynamic_shapes for input 'x' names dim 5, but x has rank 2 (dims 0..1)",
        ),
        (
            Pair(),
            ([torch.ones(4), torch.ones(4)],),
            {"xs": [None, {1: Dim("b")}]},
            "dynamic_shapes for input 'xs[1]' names dim 1, but xs[1] has rank 1 (dims 0..0)",
        ),
    ],
)
def test_spec_naming_a_dim_the_input_lacks_is_refused_before_export(
    module: torch.nn.Module, args: tuple[Any, ...], spec: Any, message: str
) -> None:
    with pytest.raises(AotiUsageError) as caught:
        export_module(module, args, {}, dynamic_shapes=spec)
    assert str(caught.value) == message


# --------------------------------------------------------------------------- decomposition


def test_decomposition_failure_points_at_the_innermost_line() -> None:
    exported = torch.export.export(Attention(), (torch.randn(2, 16, 64),))
    with pytest.raises(AotiExportError) as caught:
        decompose(exported)
    lines = str(caught.value).splitlines()
    assert lines[0].startswith("run_decompositions failed: Cannot view a tensor with shape")
    view = line_of(Conv1D.forward, "x.view(-1, x.size(-1))")
    caller = line_of(Attention.forward, "return self.c_proj(out)")
    # the layer's .view, not the model's forward that called the layer
    assert lines[1:4] == [
        f"  at {HERE}:{view} in forward",
        "      x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)",
        f"  called from test_errors.py:{caller} in forward",
    ]
    assert any(line.startswith("  While executing %view") for line in lines)
    assert ".reshape()" in lines[-1] and 'attn_implementation="eager"' in lines[-1]
    assert caught.value.__cause__ is not None


def test_source_frame_of_original_traceback_text_is_the_innermost_outside_torch() -> None:
    site = "/venv/lib/python3.11/site-packages"
    text = "\n".join(
        [
            "Cannot view a tensor with shape torch.Size([2, 16, 64]) as (32, 64)!",
            "",
            "While executing %view_6 : ...",
            "Original traceback:",
            f'File "{site}/transformers/models/gpt2/modeling_gpt2.py", line 683, in forward',
            "    transformer_outputs = self.transformer(",
            f'  File "{site}/transformers/models/gpt2/modeling_gpt2.py", line 225, in forward',
            "    attn_output = self.c_proj(attn_output)",
            f'  File "{site}/transformers/pytorch_utils.py", line 119, in forward',
            "    x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)",
            f'  File "{site}/torch/nn/modules/module.py", line 1779, in _call_impl',
            "    return forward_call(*args, **kwargs)",
            "Use tlparse to see full graph.",
        ]
    )
    frame = source_frame(ValueError(text))
    assert frame is not None
    assert (frame.file, frame.line, frame.function) == (
        f"{site}/transformers/pytorch_utils.py",
        119,
        "forward",
    )
    assert frame.callers == ("modeling_gpt2.py:225 in forward", "modeling_gpt2.py:683 in forward")


def test_source_frame_of_a_traceback_is_the_innermost_outside_torch() -> None:
    def helper(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.split(x, [1, 7])  # raises two torch frames further in

    def model(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return helper(x)

    try:
        model(torch.ones(5))
    except RuntimeError as error:
        frame = source_frame(error)
        innermost = traceback.extract_tb(error.__traceback__)[-1]
    assert "site-packages/torch/" in innermost.filename
    assert frame is not None
    assert (frame.file, frame.line, frame.function) == (
        HERE,
        line_of(helper, "torch.split(x, [1, 7])"),
        "helper",
    )
    assert frame.text == "return torch.split(x, [1, 7])  # raises two torch frames further in"
    assert frame.callers[0] == f"test_errors.py:{line_of(model, 'return helper(x)')} in model"


def test_long_torch_reason_keeps_its_error_lines() -> None:
    text = "\n".join(
        ["CppCompileError: C++ compile error", "", "Command:", *[f"  flag {n}" for n in range(60)]]
        + ["/tmp/x.cpp:12:5: error: 'foo' was not declared in this scope", "Output: ..."]
        + ["For C++ stack trace, run with TORCHDYNAMO_EXTENDED_DEBUG_CPP=1"]
    )
    reason = torch_reason(RuntimeError(text))
    assert len(reason) <= 31
    assert reason[0] == "CppCompileError: C++ compile error"
    assert "/tmp/x.cpp:12:5: error: 'foo' was not declared in this scope" in reason
    assert reason[-1] == "... 38 more lines of torch's error (chained as __cause__)"
    assert not any("TORCHDYNAMO_EXTENDED_DEBUG_CPP" in line for line in reason)


# --------------------------------------------------------------------------- user_facing


def test_user_facing_keeps_torchs_error_as_cause_at_the_models_line() -> None:
    @user_facing
    def compile_it() -> None:
        export_module(DataDependent(), (torch.ones(3),), {})

    with pytest.raises(AotiExportError) as caught:
        compile_it()
    error = caught.value
    cause = error.__cause__
    assert type(cause).__name__ == "GuardOnDataDependentSymNode"
    assert error.__suppress_context__
    # the error itself: the caller's frame and the hidden wrapper, nothing below
    names = [frame.name for frame in traceback.extract_tb(error.__traceback__)]
    assert names[-1] == "entry_point" and "export_module" not in names
    # torch's error: cut to the model's line, none of torch's internal frames
    assert [
        (frame.filename, frame.lineno) for frame in traceback.extract_tb(cause.__traceback__)
    ] == [(HERE, line_of(DataDependent.forward, "if x.sum() > 0"))]
    assert "Could not guard on data-dependent expression" in str(cause)


def test_user_facing_without_a_cause_still_drops_the_internal_frames() -> None:
    @user_facing
    def refuse() -> None:
        export_module(Double(), (torch.ones(4, 3),), {}, dynamic_shapes=({5: Dim("b")},))

    with pytest.raises(AotiUsageError) as caught:
        refuse()
    assert caught.value.__cause__ is None
    names = [frame.name for frame in traceback.extract_tb(caught.value.__traceback__)]
    assert names[-1] == "entry_point" and "export_module" not in names


# --------------------------------------------------------------------------- calls


@pytest.fixture(scope="module")
def double_program() -> ExportedProgram:
    return torch.export.export(Double(), (torch.ones(3),))


@pytest.fixture(scope="module")
def pair_program() -> ExportedProgram:
    return torch.export.export(Pair(), ([torch.ones(3), torch.ones(3)],))


def test_keyword_for_a_positional_input_says_to_pass_it_positionally(
    double_program: ExportedProgram,
) -> None:
    with pytest.raises(ValueError) as caught:
        named_user_inputs(double_program, (), {"x": torch.ones(3)})
    assert str(caught.value) == (
        "the program takes 1 positional input (x); got 0 positional and keyword x=Tensor: "
        "pass it positionally, as at export"
    )


def test_other_nesting_says_what_was_exported_and_what_was_passed(
    pair_program: ExportedProgram,
) -> None:
    with pytest.raises(ValueError) as caught:
        named_user_inputs(pair_program, ([torch.ones(3)] * 3,), {})
    assert str(caught.value) == (
        "input structure differs from export: exported args ([Tensor, Tensor],), "
        "got args ([Tensor, Tensor, Tensor],): pass the same nesting (and number of elements)"
    )


def program_for(exported: ExportedProgram) -> AotiProgram:
    """An AotiProgram whose package is never loaded: enough to validate inputs."""
    artifact = CompiledArtifact(
        key=None,  # type: ignore[arg-type]
        package_path=Path("never-loaded.pt2"),
        signature=read_signature(exported.run_decompositions()),
        compile_seconds=0.0,
        cache_hit=False,
    )
    return AotiProgram(exported, artifact, torch.device("cpu"))


def test_program_call_messages(
    double_program: ExportedProgram, pair_program: ExportedProgram
) -> None:
    with pytest.raises(
        AotiInputError, match=r"^inputs do not match the exported program: "
    ) as caught:
        program_for(double_program)(x=torch.ones(3))
    assert str(caught.value).endswith("keyword x=Tensor: pass it positionally, as at export")
    with pytest.raises(AotiInputError, match="input structure differs from export"):
        program_for(pair_program).validate([torch.ones(3)] * 3)


# --------------------------------------------------------------------------- names


BATCH = Dim("batch", min=1, max=64)


@pytest.fixture(scope="module")
def rows_program() -> tuple[ExportedProgram, Any, tuple[Any, ...]]:
    args = (torch.randn(4, 8), torch.randn(4))
    spec = ({0: BATCH, 1: Dim.STATIC}, {0: BATCH})
    return torch.export.export(Rows(), args, dynamic_shapes=spec), spec, args


def test_shape_errors_name_the_users_dims(rows_program: Any) -> None:
    exported, spec, args = rows_program
    program = program_for(exported)
    symbol = program.shapes.input("x").shape[0]
    with pytest.raises(AotiInputError, match=f"of symbol {symbol}$"):
        program(torch.randn(100, 8), torch.randn(100))
    program.name_dims(spec, args)
    assert program.shapes.names == {symbol: "batch"}
    with pytest.raises(AotiInputError) as caught:
        program(torch.randn(100, 8), torch.randn(100))
    assert str(caught.value) == (
        "input 'x' dim 0 is 100, outside the exported range [1, 64] of Dim batch"
    )
    with pytest.raises(AotiInputError) as caught:
        program(torch.randn(4, 8, 1), torch.randn(4))
    assert str(caught.value) == (
        "input 'x' has rank 3 but the program needs rank 2 (shape [batch, 8])"
    )
    with pytest.raises(AotiInputError) as caught:
        program(torch.randn(4, 8), torch.randn(5))
    assert str(caught.value) == "input 'y' dim 0 is 5 but the program needs x.shape[0] = 4"


def test_derived_and_auto_dims() -> None:
    class Three(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
            return x.sum() + y.sum() + z.sum()

    d = Dim("d", min=2, max=100)
    args = (torch.randn(6, 3), torch.randn(3, 3), torch.randn(5))
    spec = ({0: 2 * d}, {0: d}, {0: Dim.AUTO})
    exported = torch.export.export(Three(), args, dynamic_shapes=spec)
    program = program_for(exported)
    program.name_dims(spec, args)
    auto = program.shapes.input("z").shape[0]
    assert program.shapes.display(program.shapes.input("x").shape[0]) == "2*d"
    assert program.shapes.display(auto) == auto  # Dim.AUTO keeps torch's symbol
    with pytest.raises(AotiInputError) as caught:
        program(torch.randn(202, 3), torch.randn(101, 3), torch.randn(5))
    assert str(caught.value) == (
        "input 'x' dim 0 is 202 = 2*d with d = 101, outside the exported range [2, 100] of Dim d"
    )


def test_generated_shape_report_names_the_users_dims(rows_program: Any) -> None:
    exported, spec, args = rows_program
    program = program_for(exported)
    program.name_dims(spec, args)
    symbol = program.shapes.input("x").shape[0]
    failure = ShapeFailure({symbol: 3}, seed=7, error=AssertionError("differs"))
    finding = _report(failure, failure.error, program.shapes, Generation(examples=1, max_dim=64))
    assert finding.render().splitlines()[:2] == [
        "generated shape fails: x=(3, 8), y=(3,)",
        "  x.shape[0] = 3  (batch, exported range [1, 64])",
    ]


def test_validate_inputs_without_names_keeps_torchs_symbols(rows_program: Any) -> None:
    exported, _, _ = rows_program
    shapes = read_program_shapes(exported)
    named = named_user_inputs(exported, (torch.randn(100, 8), torch.randn(100)), {})
    with pytest.raises(AotiInputError, match=r"of symbol s\d+$"):
        validate_inputs(shapes, named)


# --------------------------------------------------------------------------- constant outputs


def test_float_constant_output_is_refused_before_compiling(tmp_path: Path) -> None:
    decomposed = torch.export.export(FloatOut(), (torch.ones(3),)).run_decompositions()
    with pytest.raises(AotiCompileError) as caught:
        compile_package(decomposed, tmp_path / "never.pt2", None)
    assert str(caught.value).splitlines() == [
        "AOTI compile failed: output[1] is the Python float 0.5, a constant the AOTI engine "
        "cannot return",
        "  Inductor stops on it with an opaque AssertionError; tensors, None, int and bool "
        "outputs compile (the engine returns an int or bool as a 0-dim tensor)",
        "  What to try: return it as a tensor, e.g. torch.tensor(0.5), or drop it from the outputs",
    ]
    assert not (tmp_path / "never.pt2").exists()


@pytest.mark.compiles
@pytest.mark.skipif(sys.platform == "win32", reason="AOTI CPU compile needs g++")
def test_int_bool_and_none_constant_outputs_still_compile(tmp_path: Path) -> None:
    # one real compile (~8 s): the check must not refuse what the engine returns fine
    decomposed = torch.export.export(ConstantsOut(), (torch.ones(3),)).run_decompositions()
    check_constant_outputs(decomposed)
    engine = load_engine(compile_package(decomposed, tmp_path / "constants.pt2", None))
    out = engine(torch.ones(3))
    assert torch.equal(out[0], torch.full((3,), 2.0))
    assert [torch.as_tensor(value).item() for value in out[1:3]] == [3, True]
    assert out[3] is None


@pytest.mark.compiles
def test_compile_failure_keeps_torchs_reason_and_chains_it(tmp_path: Path) -> None:
    decomposed = torch.export.export(Double(), (torch.ones(3),)).run_decompositions()
    with pytest.raises(AotiCompileError) as caught:
        compile_package(decomposed, tmp_path / "x.pt2", {"cpp.cxx": (None, "no-such-compiler++")})
    lines = str(caught.value).splitlines()
    assert lines[0].startswith("AOTI compile failed: InvalidCxxCompiler: No working C++ compiler")
    assert lines[-1].startswith("  What to try: install a C++ compiler (g++)")
    assert caught.value.__cause__ is not None
