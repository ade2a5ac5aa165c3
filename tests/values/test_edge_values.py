"""Edge values: NaN, infinities, magnitudes near the dtype's overflow and of 1e10 and more,
run as deployment probes. A program wrong only there passes by default and is listed under
their own group of the hazards summary; ``values="edge"`` fails it; ``values="off"`` leaves
them out.

The fault is the suite's own, so the test holds on every torch: an Inductor post-grad pass
that rewrites float ``remainder(x, 3.0)`` into ``x - floor(x / 3.0) * 3.0``, which float32
computes to within rounding for the example's magnitudes and gets wrong by hundreds at 1e10
(the shape of pytorch/pytorch#198057, which fixed torch releases no longer show).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from listings import LISTINGS, assert_listing

from pytest_aoti.probes.check import probe_skip
from pytest_aoti.probes.feature import PROBE_KINDS
from pytest_aoti.probes.outcomes import fails, hazard_group
from pytest_aoti.probes.variants import edge_values

LISTING = LISTINGS / "edge-values-hazards.txt"

REMAINDER_BY_QUOTIENT = """
class RemainderByQuotient(CustomGraphPass):
    def __call__(self, graph):
        for node in list(graph.nodes):
            if node.op == "call_function" and node.target is torch.ops.aten.remainder.Scalar:
                x, divisor = node.args
                with graph.inserting_before(node):
                    quotient = graph.call_function(torch.ops.aten.div.Tensor, (x, divisor))
                    floor = graph.call_function(torch.ops.aten.floor.default, (quotient,))
                    times = graph.call_function(torch.ops.aten.mul.Tensor, (floor, divisor))
                    rest = graph.call_function(torch.ops.aten.sub.Tensor, (x, times))
                node.replace_all_uses_with(rest)
                graph.erase_node(node)

    def uuid(self):
        return "test_edge_values.RemainderByQuotient-1"


class Phase(torch.nn.Module):
    def forward(self, x):
        return torch.remainder(x, 3.0) + 1


CONFIGS = {"post_grad_custom_post_pass": RemainderByQuotient()}


def example():
    torch.manual_seed(0)
    return (torch.randn(4, 8),)


def test_default(aoti):
    result = aoti.check(Phase(), example(), inductor_configs=CONFIGS)
    assert "values" in result.checks


def test_edge(aoti):
    aoti.check(Phase(), example(), inductor_configs=CONFIGS, values="edge")


@pytest.mark.aoti(probes="off", values="edge")
def test_edge_without_other_probes(aoti):
    aoti.check(Phase(), example(), inductor_configs=CONFIGS)


def test_off(aoti):
    aoti.check(Phase(), example(), inductor_configs=CONFIGS, values="off")
"""


@pytest.mark.compiles
def test_a_program_wrong_only_at_1e10_is_a_hazard_by_default_and_fails_with_values_edge(
    run_aoti: Callable[..., pytest.RunResult], tmp_path: Path
) -> None:
    report = tmp_path / "aoti.json"
    result = run_aoti(REMAINDER_BY_QUOTIENT, f"--aoti-report={report}")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*FAILED*test_edge[[]cpu[]]*",
            "*FAILED*test_edge_without_other_probes[[]cpu[]]*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            'E *edge values (values="edge"): the engine differs from eager on * input set(s) '
            "with values outside the example's range (first: input 'x' values=1e10..1e12, "
            "max abs error *",
            "E *remedy: AOTI_RUNTIME_CHECK_INPUTS=1 refuses no values*",
            "E *the repro bundle holds the first variant's input; values_skip={'x'} *",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*aoti: deployment hazards*",
            "values outside the example's range: the engine differs from eager on 1 "
            "edge-value input set(s) of 1 program(s)",
            "test_inner.py::test_default*:",
            "  wrong: input 'x' values=1e10..1e12: max abs error *",
            "  remedy: AOTI_RUNTIME_CHECK_INPUTS=1 refuses no values: *",
        ]
    )
    compare_listing(result.stdout.lines)
    records = {r["test"].split("::")[-1]: r for r in json.loads(report.read_text())["checks"]}
    default = records["test_default[cpu]"]["probes"]
    edge = [probe for probe in default if probe["kind"] == "values"]
    assert {probe["variant"] for probe in edge} == {
        "values=nan",
        "values=inf",
        "values=-inf",
        "values=88.2..89.4",
        "values=1e10..1e12",
    }
    wrong = [probe for probe in edge if probe["outcome"] != "ok"]
    assert [(p["variant"], p["outcome"], p["group"]) for p in wrong] == [
        ("values=1e10..1e12", "wrong", "values")
    ]
    assert float(wrong[0]["max_abs"]) > 10
    assert records["test_default[cpu]"]["values"]["checked"] == 16, "the draws pass"
    assert not [p for p in records["test_off[cpu]"]["probes"] if p["kind"] == "values"]
    alone = records["test_edge_without_other_probes[cpu]"]["finding"]["extra"]["probes"]
    assert {p["kind"] for p in alone} == {"values"}, "probes=off runs the edge values alone"


def compare_listing(lines: list[str]) -> None:
    """The hazards summary's edge-value paragraph against the one the manual shows."""
    start = next(i for i, line in enumerate(lines) if line.startswith("values outside the"))
    end = next(i for i in range(start, len(lines)) if "  remedy: " in lines[i]) + 1
    assert_listing(lines[start:end], LISTING)


def test_edge_values_keep_the_layout_and_the_example_s_signs() -> None:
    example = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    made = dict(edge_values(example))
    assert set(made) == {
        "values=nan",
        "values=inf",
        "values=-inf",
        "values=88.2..89.4",
        "values=1e10..1e12",
    }
    for tensor in made.values():
        assert tensor.stride() == example.stride() and tensor.dtype == example.dtype
    nan = made["values=nan"].flatten()
    assert nan[::2].isnan().all() and torch.equal(nan[1::2], example.flatten()[1::2])
    large = made["values=1e10..1e12"]
    assert (large.abs() >= 1e10 * (1 - 1e-6)).all() and (large.abs() <= 1e12).all()
    assert torch.equal(torch.signbit(large), torch.signbit(example))
    near = made["values=88.2..89.4"].abs()
    assert near.min() >= 88.2 and near.max() <= 89.4 and math.isfinite(near.max().item())
    exp = near.exp()  # the magnitudes straddle float32's exp overflow
    assert torch.isinf(exp).any() and torch.isfinite(exp).any()
    # float16 holds no 1e10: its overflow edge is its own
    half = dict(edge_values(torch.randn(8, dtype=torch.float16)))
    assert "values=1e10..1e12" not in half and "values=10.6..11.7" in half
    assert edge_values(torch.arange(4)) == []


def test_edge_values_fail_only_with_values_edge_and_group_apart() -> None:
    assert hazard_group("wrong", False, "values") == "values"
    assert hazard_group("unguarded", None, "values") == "values"
    assert hazard_group("ok", None, "values") == "none"
    assert not fails("wrong", False, False, kind="values", probes="fail", edge="report")
    assert fails("wrong", False, False, kind="values", probes="report", edge="fail")
    assert not fails("wrong", False, False, kind="size", probes="report", edge="fail")
    assert fails("wrong", False, False, kind="size", probes="fail", edge="off")
    assert not fails("unguarded", None, False, kind="values", edge="fail")


def test_the_values_options_choose_which_variants_run() -> None:
    others = frozenset(PROBE_KINDS) - {"values"}
    assert probe_skip("report", None, "report", None) == {}
    assert probe_skip("off", None, "fail", None) == {"*": others}
    assert probe_skip("report", None, "off", None) == {"*": frozenset({"values"})}
    skip = probe_skip("report", {"x": {"size"}}, "report", frozenset({"x", "y"}))
    assert skip == {"x": frozenset({"size", "values"}), "y": frozenset({"values"})}
