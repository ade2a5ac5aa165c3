"""pytest_aoti.triage.localize: naming the first graph node whose value the AOTI engine gets wrong.

An Inductor post-grad pass turns the engine's ``a * 3`` into ``a + 3`` (and only the
engine's: eager never sees the pass), so the node to name is known. Real compiles cost
~8 s each here: this file does three.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_aoti.compiling.pipeline import quiet_torch_deprecations
from pytest_aoti.tolerance import Tolerance
from pytest_aoti.triage.localize import Localization, _choose, localize

Engine = Callable[..., Any]


class SinMulCos(torch.nn.Module):
    """Two outputs, one of them a view."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = x.sin()
        b = a * 3
        c = b.cos()
        return c + 1, a.sum(), c.t()[0]


class MutatingSinMulCos(torch.nn.Module):
    """Mutates its input and a buffer; its output depends on the buffer's state."""

    offset: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        # not filled with one value: such buffers hit pytorch/pytorch#165444
        self.register_buffer("offset", torch.tensor([0.25, 0.5]))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x.mul_(2)
        a = x.sin()
        b = a * 3
        c = (b + self.offset).cos()
        self.offset.add_(1)
        return c.view(-1)[1:], a.sum()


class Branchy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = torch.cond(x.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (x,))
        return result


def _example() -> torch.Tensor:
    return torch.linspace(-1.0, 1.0, 6).reshape(3, 2)


def _decompose(module: torch.nn.Module, *args: Any) -> torch.export.ExportedProgram:
    with quiet_torch_deprecations():
        exported = torch.export.export(module, args, strict=False)
        decomposed: torch.export.ExportedProgram = exported.run_decompositions()
        return decomposed


def _times_three_becomes_plus_three(graph: torch.fx.Graph) -> None:
    for node in graph.nodes:
        if node.target is torch.ops.aten.mul.Tensor and node.args[1] == 3:
            node.target = torch.ops.aten.add.Tensor


class WrongCompiler:
    """compile_engine for localize: AOTI with the fault-injecting pass; counts compiles."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.count = 0

    def __call__(self, program: torch.export.ExportedProgram) -> Engine:
        import torch._inductor

        self.count += 1
        with quiet_torch_deprecations():
            path = torch._inductor.aoti_compile_and_package(
                program,
                package_path=str(self.directory / f"instrumented{self.count}.pt2"),
                inductor_configs={"post_grad_custom_post_pass": _times_three_becomes_plus_three},
            )
            engine: Engine = torch._inductor.aoti_load_package(path)
        return engine


def _node_computing_times_three(program: torch.export.ExportedProgram) -> str:
    (name,) = [
        str(node.name)
        for node in program.graph.nodes
        if node.target is torch.ops.aten.mul.Tensor and node.args[1] == 3
    ]
    return name


def _assert_names_times_three(found: Localization, program: torch.export.ExportedProgram) -> None:
    assert found.node is not None, found.reason
    node = found.node
    assert node.name == _node_computing_times_three(program)
    assert node.op == "aten.mul.Tensor"
    assert (node.shape, node.dtype, node.input_shapes) == ((3, 2), "float32", ((3, 2),))
    assert node.mismatched == node.numel == 6
    assert node.max_abs > 0.1
    assert not node.sole_output, "cos(b) is the output, not b"
    assert node.source is not None
    assert node.source.file.endswith("test_localize.py")
    assert "a * 3" in node.source.text
    assert node.source.function == "forward"
    lines = node.describe()
    assert (
        lines[0] == f"first diverging node: {node.name} = aten.mul.Tensor((3, 2)) -> (3, 2) float32"
    )
    assert lines[1].startswith("at ") and lines[1].endswith("in forward: b = a * 3")
    assert lines[2].startswith("mismatched 6 of 6 elements (100%), max abs error ")
    assert json.loads(json.dumps(found.to_json()))["node"]["name"] == node.name


@pytest.fixture(scope="module")
def plain_program() -> torch.export.ExportedProgram:
    return _decompose(SinMulCos(), _example())


@pytest.mark.compiles
def test_names_the_node_the_engine_gets_wrong(
    plain_program: torch.export.ExportedProgram, tmp_path: Path
) -> None:
    compiler = WrongCompiler(tmp_path)
    x = _example()
    found = localize(plain_program, (x,), {}, compile_engine=compiler, tolerance=Tolerance())
    _assert_names_times_three(found, plain_program)
    assert (found.compiles, compiler.count, found.reason) == (1, 1, "")
    assert torch.equal(x, _example())


@pytest.mark.compiles
def test_mutating_stateful_program_narrowed_in_two_rounds(tmp_path: Path) -> None:
    program = _decompose(MutatingSinMulCos(), _example())
    state = {name: value.clone() for name, value in program.state_dict.items()}
    compiler = WrongCompiler(tmp_path)
    x = _example()
    # four outputs per compile leave `a * 3` out of the first round's sample of nine
    found = localize(
        program,
        (x,),
        {},
        compile_engine=compiler,
        tolerance=Tolerance(),
        calls=2,
        max_outputs=4,
    )
    _assert_names_times_three(found, program)
    assert (found.compiles, compiler.count) == (2, 2)
    assert torch.equal(x, _example())
    for name, value in program.state_dict.items():
        assert torch.equal(value, state[name]), name


def test_no_divergence_names_no_node(plain_program: torch.export.ExportedProgram) -> None:
    def eager_engine(program: torch.export.ExportedProgram) -> Engine:
        return program.module()

    x = _example()
    found = localize(plain_program, (x,), {}, compile_engine=eager_engine, tolerance=Tolerance())
    assert found.node is None and found.compiles == 1
    assert "fusion" in found.reason
    assert torch.equal(x, _example())


def test_lost_write_back_names_the_input() -> None:
    def forgetful_engine(program: torch.export.ExportedProgram) -> Engine:
        module = program.module()
        return lambda *args: module(*(arg.clone() for arg in args))

    program = _decompose(MutatingSinMulCos(), _example())
    found = localize(
        program, (_example(),), {}, compile_engine=forgetful_engine, tolerance=Tolerance()
    )
    assert found.node is None and found.compiles == 1
    assert "input 'x' is left holding another value" in found.reason


def test_compile_failure_names_no_node(plain_program: torch.export.ExportedProgram) -> None:
    def broken_compiler(program: torch.export.ExportedProgram) -> Engine:
        raise RuntimeError("no compiler here\nmore detail")

    found = localize(
        plain_program, (_example(),), {}, compile_engine=broken_compiler, tolerance=Tolerance()
    )
    assert found.node is None and found.compiles == 1
    assert found.reason.startswith("RuntimeError: no compiler here")
    assert "\n" not in found.reason
    assert json.loads(json.dumps(found.to_json())) == {
        "node": None,
        "reason": found.reason,
        "compiles": 1,
    }


def test_control_flow_is_not_instrumented() -> None:
    def never_called(program: torch.export.ExportedProgram) -> Engine:
        pytest.fail("a graph with torch.cond must not be compiled")

    program = _decompose(Branchy(), _example())
    found = localize(program, (_example(),), {}, compile_engine=never_called, tolerance=Tolerance())
    assert found.node is None and found.compiles == 0
    assert "control flow" in found.reason and "cond" in found.reason


@pytest.mark.parametrize(
    ("count", "limit"), list(itertools.product([1, 2, 5, 9, 100], [1, 2, 4, 8]))
)
def test_sample_is_evenly_spaced_and_keeps_the_last(count: int, limit: int) -> None:
    chosen = _choose(range(count), limit)
    assert chosen == sorted(set(chosen))
    assert len(chosen) == min(count, limit)
    assert chosen[-1] == count - 1


def test_a_node_that_is_the_program_s_one_output_reports_the_headline_s_figures() -> None:
    """The instrumented engine, compiled with more outputs, may be wrong by another amount
    than the engine under test: one tensor, one set of figures (the headline's)."""
    from pytest_aoti.findings import Figures
    from pytest_aoti.triage.node_finding import NodeFinding

    node = NodeFinding("mul", "aten.mul.Tensor", (3, 2), "float32", ((3, 2),), 6, 6, 2.0, 1.0, None)
    headline = Figures(
        shape=(3, 2), dtype="float32", device="cpu", numel=6, mismatched=4, max_abs=1.0,
        max_rel=0.5, mean_abs=0.3, worst_index=(0, 0), expected_value="1", actual_value="2",
    )  # fmt: skip
    assert node.as_measured(headline) is node, "an inner node's own figures stay"
    measured = replace(node, sole_output=True).as_measured(headline)
    assert (measured.mismatched, measured.max_abs, measured.max_rel) == (4, 1.0, 0.5)
    assert "mismatched 4 of 6 elements (66.7%), max abs error 1, max rel error 0.5" in (
        measured.describe()
    )
    other_shape = replace(headline, shape=(6,))
    assert replace(node, sole_output=True).as_measured(other_shape).max_abs == 2.0
