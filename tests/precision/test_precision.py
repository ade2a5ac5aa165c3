"""Precision is reported, never silent: where eager rounds to float16 and the engine keeps
float32 (the float64 reference sides with the engine), the check passes and says so in the
record and the summary; ``precision="fail"`` fails it.

The fault is the suite's own, so the test holds on every torch: an Inductor pass routes
``cos(x) * 7`` of a float16 ``x`` through a custom op that computes it in float32 and rounds
once, where eager rounds after each op; ``floor`` turns the last bit into a whole unit.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_aoti.precision.check import EMULATE, describe, precision_findings
from pytest_aoti.tolerance import LeafStats

KEEPS_FLOAT32 = """
from torch._inductor.custom_graph_pass import CustomGraphPass


@torch.library.custom_op("pytest_aoti_precision::cos_times", mutates_args=())
def cos_times(x: torch.Tensor, factor: float) -> torch.Tensor:
    return (torch.cos(x.float()) * factor).to(x.dtype)


@cos_times.register_fake
def _(x, factor):
    return torch.empty_like(x)


class KeepsFloat32(CustomGraphPass):
    def __call__(self, graph):
        aten = torch.ops.aten
        for node in list(graph.nodes):
            cos = node.args[0] if node.target is aten.mul.Tensor else None
            if getattr(cos, "target", None) is not aten.cos.default:
                continue
            with graph.inserting_before(node):
                fused = graph.call_function(
                    torch.ops.pytest_aoti_precision.cos_times.default,
                    (cos.args[0], float(node.args[1])),
                )
            fused.meta["val"] = node.meta["val"]
            node.replace_all_uses_with(fused)
            graph.erase_node(node)
            graph.erase_node(cos)

    def uuid(self):
        return "test_precision.KeepsFloat32-1"


class FloorCos(torch.nn.Module):
    def forward(self, x):
        return torch.floor(torch.cos(x) * 7)


CONFIGS = {"post_grad_custom_post_pass": KeepsFloat32()}


def inputs():
    torch.manual_seed(0)
    return (torch.randn(4096).half() * 3,)


def test_reported(aoti):
    aoti.check(FloorCos(), inputs(), inductor_configs=CONFIGS)


@pytest.mark.aoti(precision="fail")
def test_failed(aoti):
    aoti.check(FloorCos(), inputs(), inductor_configs=CONFIGS)
"""


@pytest.mark.compiles
def test_an_engine_that_keeps_float32_is_reported_and_fails_on_request(
    run_aoti: Callable[..., pytest.RunResult], tmp_path: Path
) -> None:
    report = tmp_path / "aoti.json"
    result = run_aoti(KEEPS_FLOAT32, f"--aoti-report={report}", "--aoti-probes=off")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "E * precision: output*: the engine keeps float32 where eager rounds to float16: "
            f"* element(s) differ, max abs 1; {EMULATE} makes it round as eager does",
        ]
    )
    result.stdout.fnmatch_lines(
        ["precision: output*the engine keeps float32 where eager rounds to float16*"]
    )
    records = {r["test"].split("::")[-1]: r for r in json.loads(report.read_text())["checks"]}
    passed = records["test_reported[cpu]"]
    assert passed["outcome"] == "passed" and passed["fp64_rescued"]
    (entry,) = passed["precision"]
    assert entry["dtype"] == "torch.float16" and entry["elements"] >= 1
    assert records["test_failed[cpu]"]["finding"]["kind"] == "precision"


def test_only_leaves_the_engine_rounds_closer_are_findings() -> None:
    stats = [
        (
            "",
            LeafStats(
                "output[0]", 1.0, 0.5, rescued_by_fp64=True, rounded_apart=3, dtype="torch.bfloat16"
            ),
        ),
        (
            "call 2 of 2",
            LeafStats(
                "output[0]", 1.0, 0.5, rescued_by_fp64=True, rounded_apart=5, dtype="torch.bfloat16"
            ),
        ),
        ("", LeafStats("output[1]", 1e-4, 1e-5, rescued_by_fp64=True)),  # rounding, not precision
    ]
    (entry,) = precision_findings(stats)
    assert entry["elements"] == 5 and entry["context"] == "call 2 of 2"
    assert describe(entry).startswith(
        "output[0] (call 2 of 2): the engine keeps float32 where eager rounds to bfloat16"
    )
    float32 = dict(entry, dtype="torch.float32")
    assert "round differently and the engine is closer to float64" in describe(float32)
