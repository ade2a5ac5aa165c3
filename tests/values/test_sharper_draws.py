"""Sharper draws: one-element inputs drawn with both zeros, pairs of special points that
meet in every part of the compiled loop (the scalar tail, the last element), and the
program's own constants among the points; a failure names which class met which where.

The faults are the suite's own (Inductor post-grad passes), so each test holds on every
torch, but for the one about a torch bug (:data:`~pytest_aoti.torch_bugs.MINIMUM_OF_ZEROS_ONE_ELEMENT`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from pytest_aoti.torch_bugs import MINIMUM_OF_ZEROS_ONE_ELEMENT
from pytest_aoti.values.graph_constants import constant_points, graph_constants
from pytest_aoti.values.position_inputs import position_inputs

PASSES = """
from torch._inductor.custom_graph_pass import CustomGraphPass


def opposite_zeros(graph, x, y):
    \"\"\"Where x and y hold zeros of opposite signs (bool), built in ``graph``.\"\"\"
    aten = torch.ops.aten
    zeros = graph.call_function(
        aten.logical_and.default,
        (graph.call_function(aten.eq.Scalar, (x, 0)), graph.call_function(aten.eq.Scalar, (y, 0))),
    )
    signs = graph.call_function(
        aten.ne.Tensor,
        (graph.call_function(aten.signbit.default, (x,)), graph.call_function(aten.signbit.default, (y,))),
    )
    return graph.call_function(aten.logical_and.default, (zeros, signs))


class WrongWhereZerosMeet(CustomGraphPass):
    \"\"\"minimum(x, y) answers 1000 where zeros of opposite signs meet (``at_the_end``: at
    the last element of the row only).\"\"\"

    def __init__(self, at_the_end=False):
        self.at_the_end = at_the_end

    def __call__(self, graph):
        aten = torch.ops.aten
        for node in list(graph.nodes):
            if node.op == "call_function" and node.target is aten.minimum.default:
                x, y = node.args
                value = node.meta["val"]
                with graph.inserting_after(node):
                    where = opposite_zeros(graph, x, y)
                    if self.at_the_end:
                        size = value.shape[-1]
                        index = graph.call_function(
                            torch.ops.prims.iota.default,
                            (size,),
                            {"start": 0, "step": 1, "dtype": torch.int64,
                             "device": value.device, "requires_grad": False},
                        )
                        last = graph.call_function(aten.eq.Scalar, (index, size - 1))
                        where = graph.call_function(aten.logical_and.default, (where, last))
                    wrong = graph.call_function(aten.where.ScalarSelf, (where, 1000.0, node))
                node.replace_all_uses_with(wrong, delete_user_cb=lambda user: user is not wrong)

    def uuid(self):
        return f"test_sharper_draws.WrongWhereZerosMeet-{self.at_the_end}-1"


class WrongAtTheConstant(CustomGraphPass):
    \"\"\"x + 1.7 off by one where x holds 1.7 as bfloat16 rounds it (1.703125).\"\"\"

    def __call__(self, graph):
        for node in list(graph.nodes):
            if (
                node.op == "call_function"
                and node.target is torch.ops.aten.add.Tensor
                and node.args[1] == 1.7
            ):
                x = node.args[0]
                with graph.inserting_after(node):
                    at = graph.call_function(torch.ops.aten.eq.Scalar, (x, 1.703125))
                    plus = graph.call_function(torch.ops.aten.add.Tensor, (node, 1.0))
                    wrong = graph.call_function(torch.ops.aten.where.self, (at, plus, node))
                node.replace_all_uses_with(wrong, delete_user_cb=lambda user: user not in (plus, wrong))

    def uuid(self):
        return "test_sharper_draws.WrongAtTheConstant-1"


class Reciprocal(torch.nn.Module):
    def forward(self, x, y):
        return 1 / torch.minimum(x, y)


class AddConstant(torch.nn.Module):
    def forward(self, x):
        return (x + 1.7) * 2
"""

FAULTS = (
    PASSES
    + """

def test_one_element(aoti):
    torch.manual_seed(0)
    aoti.check(
        Reciprocal(),
        (torch.randn(1), torch.randn(1)),
        inductor_configs={"post_grad_custom_post_pass": WrongWhereZerosMeet()},
    )


def test_tail(aoti):
    torch.manual_seed(0)
    aoti.check(
        Reciprocal(),
        (torch.randn(17), torch.randn(17)),
        inductor_configs={"post_grad_custom_post_pass": WrongWhereZerosMeet(at_the_end=True)},
    )


def test_constant(aoti):
    torch.manual_seed(0)
    aoti.check(
        AddConstant(),
        (torch.randn(4, 8, dtype=torch.bfloat16),),
        inductor_configs={"post_grad_custom_post_pass": WrongAtTheConstant()},
    )

"""
)


@pytest.mark.compiles
def test_faults_at_one_element_the_last_element_and_a_constant_fail_by_default(
    run_aoti: Callable[..., pytest.RunResult], tmp_path: Path
) -> None:
    report = tmp_path / "aoti.json"
    result = run_aoti(FAULTS, "--aoti-probes=off", f"--aoti-report={report}")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(
        [
            "*test_one_element*",
            "E * values draw * fails: x[[]0[]] = *0.0, y[[]0[]] = *0.0",
            "E *where x's *0.0 met y's *0.0 at the last element, element 0",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*test_tail*",
            "E * values draw * fails: x[[]16[]] = *0.0, y[[]16[]] = *0.0",
            "E *where x's *0.0 met y's *0.0 at the last element, element 16",
            "E *special points: x[[]16[]] = *0.0 (*0.0; the last element, the scalar tail)*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*test_constant*",
            # a planned draw of the constant, or a plain draw that took it by chance
            "E * values draw * fails: *x[[]*[]] = 1.703125*",
            "E *special points: *x[[]*[]] = 1.703125 (graph constant 1.7*)*",
        ]
    )
    records = {r["test"].split("::")[-1]: r for r in json.loads(report.read_text())["checks"]}
    failed = records["test_constant[cpu]"]["finding"]["extra"]["values"]
    assert failed["constants"] == [1.7, 2.0]
    tail = records["test_tail[cpu]"]["finding"]["extra"]["values"]
    assert (
        tail["met"] == "x's -0.0 met y's +0.0 at the last element, element 16"
        or tail["met"] == "x's +0.0 met y's -0.0 at the last element, element 16"
    )


BUG = """

class BfloatReciprocal(torch.nn.Module):
    def forward(self, x, y):
        return 1 / torch.minimum(x, y)


def test_bug(aoti):
    torch.manual_seed(0)
    x, y = torch.randn(1, dtype=torch.bfloat16), torch.randn(1, dtype=torch.bfloat16)
    aoti.check(BfloatReciprocal(), (x, y))
"""


@pytest.mark.compiles
@pytest.mark.skipif(
    not MINIMUM_OF_ZEROS_ONE_ELEMENT.measured_in(),
    reason="measured only on " + ", ".join(MINIMUM_OF_ZEROS_ONE_ELEMENT.measured),
)
def test_the_one_element_bfloat16_minimum_bug_fails_by_default(
    run_aoti: Callable[..., pytest.RunResult],
) -> None:
    result = run_aoti(BUG, "--aoti-probes=off")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["E * values draw * fails: *", "E *where x's *0.0 met y's *0.0 at the last element*"]
    )


def test_the_graph_s_scalar_literals_are_its_constants() -> None:
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.fmod(x, 1.7) + torch.nn.functional.layer_norm(x, (8,), eps=1e-5)
            y = y.masked_fill(x > 0.25, -1e9) * 0.125
            return y.pow(2).clamp(max=6.0) + x.sum(dim=1, keepdim=True)

    exported = torch.export.export(Model(), (torch.randn(4, 8),)).run_decompositions()
    constants = graph_constants(exported)
    assert {1.7, 0.25, 0.125, 2.0, 6.0} <= set(constants)
    assert -1e9 not in constants and 1 not in constants and 0 not in constants
    points, origins = constant_points((1.7,), torch.bfloat16)
    assert points[:3] == (1.703125, 1.7109375, 1.6953125)
    assert -1.703125 in points and 3.40625 in points and set(origins) == {1.7}


def test_one_element_inputs_the_program_uses_as_positions_keep_their_values() -> None:
    class Model(torch.nn.Module):
        def forward(self, cache, pos, start, steps, scale):
            picked = cache.index_select(0, pos + 1)
            window = cache.narrow(0, start.item(), 2)
            return picked.sum() + window.sum() * steps * scale

    example = (
        torch.randn(8, 4),
        torch.tensor([2]),
        torch.tensor(1),
        torch.tensor(3),
        torch.tensor(0.5),
    )
    exported = torch.export.export(Model(), example)
    names = ("pos", "start", "steps", "scale")
    assert position_inputs(exported, names) == {"pos", "start"}
