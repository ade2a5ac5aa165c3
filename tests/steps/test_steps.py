"""Decode loops: ``steps=N, next_inputs=fn`` runs a chain of calls on each side, each fed by
its own outputs, compared at every step.

The faults are the suite's own (Inductor post-grad passes): one wrong only once a 0-dim
position reaches 8 (the ninth step), one that flips a greedy token on a tie of its logits.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_aoti.errors import AotiUsageError
from pytest_aoti.run.resolve import check_steps

DECODE = """
from dataclasses import dataclass

from torch.export import Dim

import torch.utils._pytree as pytree
from torch._inductor.custom_graph_pass import CustomGraphPass


class DecodeStep(torch.nn.Module):
    \"\"\"One decode step: the token's key and value written into the caches in place at
    ``pos``, attention over the positions so far.\"\"\"

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(16, 16) for _ in range(4))

    def forward(self, x, k_cache, v_cache, pos):
        k_cache.index_copy_(0, pos.view(1), self.k(x))
        v_cache.index_copy_(0, pos.view(1), self.v(x))
        scores = self.q(x) @ k_cache.T * 0.25
        seen = torch.arange(k_cache.shape[0]) <= pos
        scores = scores.masked_fill(~seen, float("-inf"))
        return self.o(torch.softmax(scores, -1) @ v_cache)


def next_step(out, args, kwargs):
    x, k_cache, v_cache, pos = args
    return (torch.tanh(out), k_cache, v_cache, pos + 1), {}


def decode_inputs():
    torch.manual_seed(1)
    return torch.randn(1, 16), torch.zeros(32, 16), torch.zeros(32, 16), torch.tensor(0)


class WrongFromPositionEight(CustomGraphPass):
    \"\"\"The output off by one once the 0-dim int64 input (the position) reaches 8.\"\"\"

    def __call__(self, graph):
        aten = torch.ops.aten
        pos = next(
            node for node in graph.nodes
            if node.op == "placeholder"
            and getattr(node.meta.get("val"), "dtype", None) == torch.int64
            and node.meta["val"].dim() == 0
        )
        output = next(node for node in graph.nodes if node.op == "output")
        value = output.args[0][0]
        with graph.inserting_before(output):
            late = graph.call_function(aten.ge.Scalar, (pos, 8))
            plus = graph.call_function(aten.add.Tensor, (value, 1.0))
            wrong = graph.call_function(aten.where.self, (late, plus, value))
        output.args = ((wrong, *output.args[0][1:]),)

    def uuid(self):
        return "test_steps.WrongFromPositionEight-1"


class WrongOnACachedHalf(CustomGraphPass):
    \"\"\"The output off by one from position 1 on where the key cache holds 0.5: what
    only a draw's cache holds, and only a later step reads.\"\"\"

    def __call__(self, graph):
        aten = torch.ops.aten
        placeholders = [node for node in graph.nodes if node.op == "placeholder"]
        pos = next(
            node for node in placeholders
            if getattr(node.meta.get("val"), "dtype", None) == torch.int64
            and node.meta["val"].dim() == 0
        )
        cache = next(
            node for node in placeholders
            if tuple(getattr(node.meta.get("val"), "shape", ())) == (32, 16)
        )
        output = next(node for node in graph.nodes if node.op == "output")
        value = output.args[0][0]
        with graph.inserting_before(output):
            half = graph.call_function(aten.any.default, (graph.call_function(aten.eq.Scalar, (cache, 0.5)),))
            late = graph.call_function(aten.ge.Scalar, (pos, 1))
            both = graph.call_function(aten.logical_and.default, (half, late))
            plus = graph.call_function(aten.add.Tensor, (value, 1.0))
            wrong = graph.call_function(aten.where.self, (both, plus, value))
        output.args = ((wrong, *output.args[0][1:]),)

    def uuid(self):
        return "test_steps.WrongOnACachedHalf-1"


def test_decode_drawn_fault(aoti):
    aoti.check(
        DecodeStep(),
        decode_inputs(),
        steps=4,
        next_inputs=next_step,
        inductor_configs={"post_grad_custom_post_pass": WrongOnACachedHalf()},
    )


def test_decode(aoti):
    aoti.check(DecodeStep(), decode_inputs(), steps=24, next_inputs=next_step)


def test_decode_fault(aoti):
    aoti.check(
        DecodeStep(),
        decode_inputs(),
        steps=24,
        next_inputs=next_step,
        inductor_configs={"post_grad_custom_post_pass": WrongFromPositionEight()},
    )


class Greedy(torch.nn.Module):
    \"\"\"Two logits that tie at pos == 2, and the greedy token.\"\"\"

    def forward(self, x, pos):
        s = x.sum()
        logits = torch.stack([s, s + (pos - 2).to(x.dtype) * 0.5])
        return logits, torch.argmax(logits, -1)


class LastOfTies(CustomGraphPass):
    \"\"\"argmax picking the last of equal maxima (eager picks the first).\"\"\"

    def __call__(self, graph):
        aten = torch.ops.aten
        for node in list(graph.nodes):
            if node.op == "call_function" and node.target is aten.argmax.default:
                x, dim = node.args[0], node.args[1]
                value = x.meta["val"]
                with graph.inserting_before(node):
                    top = graph.call_function(aten.amax.default, (x, [dim], True))
                    at_top = graph.call_function(aten.eq.Tensor, (x, top))
                    index = graph.call_function(
                        torch.ops.prims.iota.default,
                        (value.shape[dim],),
                        {"start": 0, "step": 1, "dtype": torch.int64,
                         "device": value.device, "requires_grad": False},
                    )
                    marked = graph.call_function(aten.where.ScalarOther, (at_top, index, -1))
                    last = graph.call_function(aten.amax.default, (marked, [dim]))
                node.replace_all_uses_with(last)
                graph.erase_node(node)

    def uuid(self):
        return "test_steps.LastOfTies-1"


def next_greedy(out, args, kwargs):
    x, pos = args
    return (x, pos + 1), {}


@pytest.mark.aoti(values="off")
def test_tie(aoti):
    torch.manual_seed(2)
    aoti.check(
        Greedy(),
        (torch.randn(4), torch.tensor(0)),
        steps=5,
        next_inputs=next_greedy,
        inductor_configs={"post_grad_custom_post_pass": LastOfTies()},
    )


@dataclass
class Cache:
    keys: torch.Tensor
    length: torch.Tensor


if Cache not in pytree.SUPPORTED_NODES:
    torch.export.register_dataclass(Cache, serialized_type_name="test_steps_inner.Cache")


class Rolling(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x, cache):
        keys = torch.cat([cache.keys[1:], self.proj(x)], 0)
        return keys.mean(0, keepdim=True), Cache(keys, cache.length + 1)


def next_rolling(out, args, kwargs):
    summary, cache = out
    return (torch.tanh(summary), cache), {}


def test_dataclass_cache(aoti):
    torch.manual_seed(4)
    cache = Cache(torch.randn(6, 8), torch.tensor(0))
    aoti.check(Rolling(), (torch.randn(1, 8), cache), steps=8, next_inputs=next_rolling)


class Summary(torch.nn.Module):
    \"\"\"The next position's vector from the sequence so far: each step one longer.\"\"\"

    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.tanh(self.proj(x).mean(1, keepdim=True))


def grow(out, args, kwargs):
    (x,) = args
    return (torch.cat([x, out], 1),), {}


def check_growing(aoti, steps):
    torch.manual_seed(6)
    aoti.check(
        Summary(),
        (torch.randn(1, 2, 8),),
        dynamic_shapes=({1: Dim("seq", min=2, max=6)},),
        steps=steps,
        next_inputs=grow,
    )


def test_growing(aoti):
    check_growing(aoti, 5)  # the sequence 2, 3, ..., 6 long


def test_growing_past_its_range(aoti):
    check_growing(aoti, 6)  # the sixth step's sequence is 7 long
"""


@pytest.mark.compiles
def test_a_decode_loop_is_compared_at_every_step_and_a_late_fault_names_its_step(
    run_aoti: Callable[..., pytest.RunResult], tmp_path: Path
) -> None:
    report = tmp_path / "aoti.json"
    result = run_aoti(DECODE, "--aoti-probes=off", f"--aoti-report={report}")
    result.assert_outcomes(passed=4, failed=3)
    result.stdout.fnmatch_lines(
        [
            "*test_decode_fault*",
            "E * output differs between eager and the AOTI engine (step 9 of 24)*",
            "E *the first step that differs is step 9 of 24*",
            "E *largest abs error of each step before it: 1: *, 8: *",
        ]
    )
    # the values draws run the loop too: a fault only a drawn cache shows at step 2
    result.stdout.fnmatch_lines(
        [
            "*test_decode_drawn_fault*",
            "E * values draw * fails: *",
            "E *the first step that differs is step 2 of 4*",
        ]
    )
    # a growing sequence: every step inside the exported range runs; one past it is refused
    result.stdout.fnmatch_lines(
        [
            "*test_growing_past_its_range*",
            "E *step 6 of 6: the inputs next_inputs built do not fit the exported program*seq*",
        ]
    )
    records = {r["test"].split("::")[-1]: r for r in json.loads(report.read_text())["checks"]}
    assert len(records["test_growing[cpu]"]["steps"]["per_step"]) == 5
    assert records["test_decode[cpu]"]["values"]["steps"] == 24
    decoded = records["test_decode[cpu]"]["steps"]
    assert decoded["steps"] == 24 and len(decoded["per_step"]) == 24
    assert [figure["step"] for figure in decoded["per_step"]] == list(range(1, 25))
    assert decoded["ties"] == [] and decoded["buffers"] == "none"
    tie = records["test_tie[cpu]"]
    assert tie["steps"]["ties"] == [3], tie["steps"]
    assert any("tie" in note and "step(s) 3" in note for note in tie["notes"]), tie["notes"]
    assert len(records["test_dataclass_cache[cpu]"]["steps"]["per_step"]) == 8
    failed = records["test_decode_fault[cpu]"]["finding"]["extra"]["steps"]
    assert failed["failed_step"] == 9 and len(failed["per_step"]) == 8


def test_steps_need_next_inputs_and_leave_calls_out() -> None:
    check_steps(None, None, 2)
    check_steps(3, lambda out, args, kwargs: (args, kwargs), None)
    with pytest.raises(AotiUsageError, match="give steps=N too"):
        check_steps(None, lambda out, args, kwargs: (args, kwargs), None)
    with pytest.raises(AotiUsageError, match="needs next_inputs=fn"):
        check_steps(3, None, None)
    with pytest.raises(AotiUsageError, match="steps must be a positive int"):
        check_steps(0, lambda out, args, kwargs: (args, kwargs), None)
    with pytest.raises(AotiUsageError, match="leave calls= out"):
        check_steps(3, lambda out, args, kwargs: (args, kwargs), 2)


@pytest.mark.compiles
def test_a_failing_step_s_bundle_replays_the_chain_up_to_that_step_in_a_fresh_python(
    run_aoti: Callable[..., pytest.RunResult], tmp_path: Path, run_isolated: Any
) -> None:
    bundles = tmp_path / "failed"
    result = run_aoti(
        DECODE,
        "--aoti-probes=off",
        "--aoti-localize=off",
        f"--aoti-keep-failed={bundles}",
        "-k",
        "test_decode_fault",
    )
    result.assert_outcomes(failed=1)
    [folder] = list(bundles.iterdir())
    assert (folder / "steps.pt").is_file()
    run = run_isolated(folder / "repro.py", tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "REPRODUCED: the AOTI engine differs from eager" in run.stdout
    # the chain up to the failing step, each call on its step's inputs: the cache the
    # earlier steps wrote is there, and only the ninth call differs
    assert "9 calls of a decode loop, each on its step's inputs" in run.stdout
    engine = run.stdout.split("AOTI engine vs eager:")[1].split(" vs eager:")[0]
    assert "call 9 of 9" in engine and "of 9" not in engine.replace("call 9 of 9", "")
