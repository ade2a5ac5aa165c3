"""Swapped weights: a weight the engine cannot take is a deployment hazard named in the
summary by default, and fails the check under ``weights="swap"``.

Five programs, compiled once and shared through the cache: the two-layer MLP of
docs/weights.md with default options (its ``l2.bias`` folded into the code on the torch
releases :data:`~pytest_aoti.torch_bugs.FOLDED_WEIGHT_NOT_SWAPPABLE` names), the same MLP
with runtime constant folding (a correct program: every weight follows the swap), the MLP
compiled with a post-grad pass of the suite's own that writes ``l1.bias`` into the code (on
every torch), a program that reads a buffer (folded, with its ``l1.bias``, on the same
releases), and one whose weight is a view into a larger storage (its compiled value loaded
back whole after the swap).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
import torch

from pytest_aoti.torch_bugs import FOLDED_WEIGHT_NOT_SWAPPABLE
from pytest_aoti.weights.check import SETS

SWAPPED = """
from torch._inductor.custom_graph_pass import CustomGraphPass


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.l1 = torch.nn.Linear(8, 16)
        self.l2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


class Scaled(torch.nn.Module):
    \"\"\"Reads a buffer of its own: a per-feature scale.\"\"\"

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.l1 = torch.nn.Linear(8, 4)
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 4))

    def forward(self, x):
        return torch.tanh(self.l1(x)) * self.scale


class Sliced(torch.nn.Module):
    \"\"\"A weight that is a view into a larger storage: rows of a fused table.\"\"\"

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(12, 8)[4:8])

    def forward(self, x):
        return x @ self.w.t()


class BakesBias(CustomGraphPass):
    \"\"\"A compiler fault in the engine only: the values of the 16-element weight (l1.bias)
    written into the code as literals; the weight itself is still read, times zero, so the
    engine lists it and takes a new value, and its answers never change with it.\"\"\"

    def __call__(self, graph):
        for node in list(graph.nodes):
            value = graph.owning_module if node.op == "get_attr" else None
            for name in str(node.target).split(".") if value is not None else ():
                value = getattr(value, name, None)
            if not isinstance(value, torch.Tensor) or tuple(value.shape) != (16,):
                continue
            with graph.inserting_after(node):
                literals = [
                    graph.call_function(
                        torch.ops.aten.full.default,
                        ([1], float(v)),
                        {"dtype": value.dtype, "device": value.device},
                    )
                    for v in value.tolist()
                ]
                baked = graph.call_function(torch.ops.aten.cat.default, (literals,))
                unread = graph.call_function(torch.ops.aten.mul.Tensor, (node, 0.0))
                kept = graph.call_function(torch.ops.aten.add.Tensor, (baked, unread))
            node.replace_all_uses_with(kept, delete_user_cb=lambda user: user is not unread)

    def uuid(self):
        return "test_weights.BakesBias-1"


def example():
    torch.manual_seed(1)
    return (torch.randn(4, 8),)


def test_mlp(aoti):
    aoti.check(MLP(), example())


def test_folding(aoti):
    aoti.check(
        MLP(), example(), inductor_configs={"aot_inductor.use_runtime_constant_folding": True}
    )


def test_baked(aoti):
    configs = {"post_grad_custom_post_pass": BakesBias()}
    aoti.check(MLP(), example(), inductor_configs=configs, rtol=1e-3, atol=1e-3)


def test_scaled(aoti):
    aoti.check(Scaled(), example())


def test_sliced(aoti):
    module = Sliced()
    folding = {"aot_inductor.use_runtime_constant_folding": True}
    engine = aoti.check(module, example(), inductor_configs=folding).program
    # the compiled weights loaded back whole: the engine answers as eager does
    torch.testing.assert_close(engine(*example()), module(*example()))
"""

FOLDS = FOLDED_WEIGHT_NOT_SWAPPABLE.measured_in()
"""Whether this torch was measured to fold the MLP's ``l2.bias``, and the other program's
``l1.bias`` and buffer ``scale``, into the compiled code."""


def records(report: Path) -> dict[str, dict]:
    return {
        r["test"].split("::")[-1].removesuffix("[cpu]"): r
        for r in json.loads(report.read_text())["checks"]
    }


@pytest.mark.compiles
def test_a_weight_the_engine_cannot_take_is_a_hazard_by_default_and_fails_a_swap(
    run_aoti: Callable[..., pytest.RunResult], tmp_path: Path, run_isolated: Any
) -> None:
    report, junit = tmp_path / "aoti.json", tmp_path / "junit.xml"
    result = run_aoti(
        SWAPPED, f"--aoti-report={report}", f"--junitxml={junit}", "--aoti-probes=off"
    )
    result.assert_outcomes(passed=5)
    section = result.stdout.str().split("weights a server cannot swap")[1]
    assert "test_folding" not in section, "every weight follows the swap"
    result.stdout.fnmatch_lines(
        [
            "*aoti: weights a server cannot swap (* program*; not failures)*",
            "test_inner.py::test_baked[[]cpu[]]: weight swap: the engine cannot take * "
            "weight*: *'l1.bias'*",
            "    1 accepted by load_constants and not followed by the engine: 'l1.bias'",
            "    what a server sees: a server's load_constants succeeds, and the engine keeps "
            "answering with the compiled 'l1.bias'",
            "    measured: after the swap of weight set 0, the engine differs from eager *",
        ]
    )
    if FOLDS:
        result.stdout.fnmatch_lines(
            [
                "test_inner.py::test_mlp[[]cpu[]]: weight swap: the engine cannot take 1 "
                "weight: 'l2.bias'",
                "    1 folded into the compiled code (not among get_constant_fqns()): the engine "
                "keeps their compiled values: 'l2.bias'",
                "    what a server sees: a server that loads its new state dict *",
                "    measured: after the swap of weight set 0, the engine differs from eager *",
                '  remedy: compile with inductor_configs={"aot_inductor.use_runtime_constant'
                '_folding": True}*',
                "  weights='swap' fails the check on it, *",
            ]
        )
        result.stdout.fnmatch_lines(
            [
                "test_inner.py::test_scaled[[]cpu[]]: weight swap: the engine cannot take 2 "
                "weights: 'l1.bias', 'scale'",
                "    2 folded into the compiled code (not among get_constant_fqns()): the engine "
                "keeps their compiled values: 'l1.bias', 'scale'",
            ]
        )

    found = records(report)
    sliced = found["test_sliced"]["weights"]
    assert sliced["findings"] == [] and sliced["ran"] == SETS, sliced
    folding = found["test_folding"]["weights"]
    assert folding["findings"] == [] and folding["ran"] == SETS, folding
    assert folding["runtime_folding"] is True and folding["swapped"] == 4
    assert folding["stopped"] == "" and folding["constants"] >= 4
    baked = found["test_baked"]["weights"]
    ignored = [(f["weight"], f["reason"]) for f in baked["findings"] if f["reason"] == "ignored"]
    assert ignored == [("l1.bias", "ignored")], baked
    assert baked["stopped"] == "a finding" and baked["narrowing_runs"] >= 2
    assert baked["difference"]["max_abs"] > 0.1
    if FOLDS:
        mlp = found["test_mlp"]["weights"]
        assert [(f["weight"], f["reason"]) for f in mlp["findings"]] == [("l2.bias", "folded")]
        assert mlp["findings"][0]["error"] == "Constant not found: l2.bias"
        assert mlp["ran"] == 1 and mlp["narrowing_runs"] == 0, "the folded bias explains it"
        scaled = found["test_scaled"]["weights"]
        assert [f["weight"] for f in scaled["findings"]] == ["l1.bias", "scale"], scaled
    properties = {
        case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
        for case in ElementTree.parse(junit).getroot().iter("testcase")
    }
    assert "l1.bias" in properties["test_baked[cpu]"]["aoti_weights_cannot_swap"]
    assert properties["test_folding[cpu]"]["aoti_weights_sets"] == str(SETS)
    assert properties["test_folding[cpu]"]["aoti_weights_findings"] == "0"

    # the serving mode: the same programs, from the cache, fail on the weights they cannot take
    bundles = tmp_path / "failed"
    swap = run_aoti(
        SWAPPED, "--aoti-weights=swap", "--aoti-probes=off", f"--aoti-keep-failed={bundles}"
    )
    swap.assert_outcomes(passed=4 - 2 * FOLDS, failed=1 + 2 * FOLDS)
    swap.stdout.fnmatch_lines(
        [
            "E * weight swap: the engine cannot take * weight*: *'l1.bias'*",
            "E *'l1.bias': load_constants accepts a new value, and the engine does not follow it",
            "E *weight sets: 1 of * compared (stopped: a finding); weights='swap' fails *",
            "E *repro bundle: *test_baked*exits 1 while it reproduces this failure*",
        ]
    )
    baked_bundle = assert_the_bundle_replays_the_swap(bundles, "test_baked", tmp_path, run_isolated)
    check = json.loads((baked_bundle / "check.json").read_text())
    assert (check["rtol"], check["atol"]) == (1e-3, 1e-3), "the test's tolerance"
    if FOLDS:
        swap.stdout.fnmatch_lines(
            [
                "E * weight swap: the engine cannot take 1 weight: 'l2.bias'",
                "E *'l2.bias': not among the engine's constants (get_constant_fqns()): its "
                "value was folded into the compiled code at compile time; load_constants "
                "refuses it (Constant not found: l2.bias)",
                "E *what a server sees: a server that loads its new state dict *",
                "E *measured: after the swap of weight set 0, the engine differs from eager *",
                'E *remedy: compile with inductor_configs={"aot_inductor.use_runtime_constant'
                '_folding": True}*',
            ]
        )
    assert "weights a server cannot swap" not in swap.stdout.str()
    if FOLDS:
        assert_the_bundle_replays_the_swap(bundles, "test_mlp", tmp_path, run_isolated)

    off = run_aoti(SWAPPED, "--aoti-weights=off", "--aoti-probes=off", f"--aoti-report={report}")
    off.assert_outcomes(passed=5)
    assert all(record["weights"] is None for record in records(report).values())


def assert_the_bundle_replays_the_swap(
    bundles: Path, test: str, cwd: Path, run_isolated: Any
) -> Path:
    """The failure's repro bundle carries the weight set that differed: ``repro.py``, with
    torch alone, loads it into the engine and the uncompiled programs and shows the
    difference the check measured again, made by the compile; the bundle's folder."""
    [folder] = [folder for folder in bundles.iterdir() if test in folder.name]
    check = json.loads((folder / "check.json").read_text())
    assert check["weights"] == ["l1.bias", "l1.weight", "l2.bias", "l2.weight"], check
    finding = json.loads((folder / "finding.json").read_text())
    assert finding["kind"] == "weights"
    weights = torch.load(folder / "weights.pt", weights_only=True)
    assert sorted(weights) == check["weights"]
    run = run_isolated(folder / "repro.py", cwd)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "load_constants loads" in run.stdout, run.stdout
    assert "REPRODUCED: the AOTI engine differs from eager" in run.stdout, run.stdout
    assert "The exported and the decomposed programs match eager" in run.stdout, run.stdout
    measured = finding["extra"]["weights"]["difference"]["max_abs"]
    assert f"max abs error {measured:.3g}," in run.stdout, "the set the check measured"
    return folder


def test_the_option_is_checked_before_anything_is_exported(
    run_aoti: Callable[..., pytest.RunResult],
) -> None:
    result = run_aoti(
        """
        def test_bad(aoti):
            aoti.check(torch.nn.Linear(2, 2), (torch.randn(1, 2),), weights="always")
        """
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*weights must be one of 'swap', 'report', 'off', got 'always'*"])
    assert "compiling" not in result.stdout.str()


def test_the_flag_and_ini_key_take_the_three_modes(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*--aoti-weights=*", "*aoti_weights *"])
    bad = pytester.runpytest("--aoti-weights=sometimes")
    bad.stderr.fnmatch_lines(["*expected one of swap, report, off, got 'sometimes'*"])
