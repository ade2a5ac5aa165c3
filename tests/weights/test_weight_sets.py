"""Weight sets and the findings' text, without a compile: what is drawn and what is kept, the
same sets on every run, eager's copy holding them while the module keeps its own (one
``copy.deepcopy`` refuses too), and the words a finding, the summary and the JUnit properties
give."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from section_lines import SectionLines

from pytest_aoti.weights.draws import (
    KEPT_INTEGER,
    KEPT_NOT_FINITE,
    KEPT_SINGLE,
    KEPT_STATE,
    draw_set,
    module_holding,
    module_weights,
    used_names,
    weight_seed,
    with_values,
)
from pytest_aoti.weights.feature import WEIGHTS, weights_properties
from pytest_aoti.weights.hazards import (
    DIFFERS,
    FOLDED,
    FOLDING_REMEDY,
    IGNORED,
    OTHER_REMEDY,
    REFUSED,
    failure_text,
    finding_line,
    remedy_lines,
    server_lines,
    write_weights_hazards,
)


class Mixed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.low = torch.nn.Linear(4, 4).to(torch.float16)
        self.wide = torch.nn.Parameter(torch.randn(3, dtype=torch.float64))
        self.norm = torch.nn.LayerNorm(4)  # ones and zeros: single-valued
        self.register_buffer("positions", torch.arange(4))
        self.register_buffer("temperature", torch.tensor(0.7))
        self.register_buffer("mask", torch.tensor([0.0, float("-inf"), 1.0]))
        self.register_buffer("running", torch.rand(4) + 1)
        self.register_buffer("scratch", torch.randn(2), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.low(x.half()).float()) * self.running + self.positions


def test_each_weight_is_drawn_in_its_dtype_shape_and_range_or_kept_with_a_reason() -> None:
    module = Mixed()
    weights = {weight.name: weight for weight in module_weights(module, mutated={"running"})}
    assert "scratch" not in weights, "a buffer outside the state dict is no weight"
    kept = {name: weight.kept for name, weight in weights.items() if weight.kept}
    assert kept == {
        "norm.weight": KEPT_SINGLE,
        "norm.bias": KEPT_SINGLE,
        "positions": KEPT_INTEGER,
        "temperature": KEPT_SINGLE,
        "mask": KEPT_NOT_FINITE,
        "running": KEPT_STATE,
    }
    drawn = draw_set(weights.values(), seed=1)
    assert set(drawn) == {"low.weight", "low.bias", "wide"}
    for name, value in drawn.items():
        original = weights[name].tensor
        assert value.dtype == original.dtype and value.shape == original.shape
        assert value.stride() == original.stride() and value.device == original.device
        assert original.min() <= value.min() and value.max() <= original.max()
        assert not torch.equal(value, original.detach())
        assert value.std() > original.std() / 4, "the weight's own spread, not a point"


def test_the_sets_are_the_same_every_run_and_differ_by_index_test_and_program() -> None:
    weights = module_weights(Mixed())
    seed = weight_seed("test_a.py::test_x[cpu]", "key", 0)
    assert seed == weight_seed("test_a.py::test_x[cpu]", "key", 0)
    assert len({seed, weight_seed("test_a.py::test_x[cpu]", "key", 1)}) == 2
    assert len({seed, weight_seed("test_a.py::test_y[cpu]", "key", 0)}) == 2
    assert len({seed, weight_seed("test_a.py::test_x[cpu]", "other", 0)}) == 2
    first, again = draw_set(weights, seed), draw_set(weights, seed)
    assert all(torch.equal(first[name], again[name]) for name in first)
    other = draw_set(weights, seed + 1)
    assert not torch.equal(first["wide"], other["wide"])


def test_tied_weights_are_one_weight_under_both_names() -> None:
    module = torch.nn.Sequential(torch.nn.Embedding(5, 3), torch.nn.Linear(3, 5, bias=False))
    module[1].weight = module[0].weight
    weights = module_weights(module)
    assert [weight.names for weight in weights] == [("0.weight", "1.weight")]
    values = with_values(weights, draw_set(weights, 3))
    assert values["0.weight"] is values["1.weight"]
    copy = module_holding(module, values)
    assert copy[0].weight is copy[1].weight and torch.equal(copy[0].weight, values["0.weight"])


def test_eager_s_copy_holds_the_new_weights_and_the_module_keeps_its_own() -> None:
    module = Mixed()
    before = {name: value.clone() for name, value in module.state_dict().items()}
    weights = module_weights(module)
    new = draw_set(weights, 5)
    copy = module_holding(module, with_values(weights, new, names=["wide"]))
    assert torch.equal(copy.wide, new["wide"]) and isinstance(copy.wide, torch.nn.Parameter)
    assert copy.low.weight is module.low.weight, "a weight not swapped is shared, not copied"
    assert copy.running is module.running, "eager copies the buffers it runs with"
    for name, value in module.state_dict().items():
        assert torch.equal(value, before[name]), name


class LoRA(torch.nn.Module):
    """Built only with its dimensions: ``copy.deepcopy`` calls ``LoRA.__new__(LoRA)``."""

    scale: torch.Tensor

    def __new__(cls, dim_in: int, dim_out: int) -> LoRA:
        return super().__new__(cls)

    def __init__(self, dim_in: int, dim_out: int) -> None:
        super().__init__()
        self.down = torch.nn.Parameter(torch.randn(dim_in, 2))
        self.up = torch.nn.Parameter(torch.randn(2, dim_out))
        self.register_buffer("scale", torch.rand(dim_out) + 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.down @ self.up * self.scale


def test_eager_holds_new_weights_in_a_module_deepcopy_refuses() -> None:
    module: Any = torch.nn.Sequential(torch.nn.Linear(4, 4), LoRA(4, 4))
    before = {name: value.clone() for name, value in module.state_dict().items()}
    weights = module_weights(module)
    new = draw_set(weights, 2)
    copy: Any = module_holding(module, with_values(weights, new, names=["1.down", "1.scale"]))
    assert type(copy[1]) is LoRA and isinstance(copy[1].down, torch.nn.Parameter)
    assert torch.equal(copy[1].down, new["1.down"]) and torch.equal(copy[1].scale, new["1.scale"])
    assert copy[1].up is module[1].up and copy[0].weight is module[0].weight
    for name, value in module.state_dict().items():
        assert torch.equal(value, before[name]), name


def test_the_weights_a_program_reads() -> None:
    class Unused(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.used = torch.nn.Linear(2, 2)
            self.spare = torch.nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.used(x)

    exported = torch.export.export(Unused(), (torch.randn(1, 2),))
    assert used_names(exported) == {"used.weight", "used.bias"}


def test_a_finding_says_what_the_engine_did_and_what_a_server_sees() -> None:
    folded = {"weight": "l2.bias", "reason": FOLDED, "error": "Constant not found: l2.bias"}
    assert finding_line(folded) == (
        "'l2.bias': not among the engine's constants (get_constant_fqns()): its value was "
        "folded into the compiled code at compile time; load_constants refuses it "
        "(Constant not found: l2.bias)"
    )
    refused = {"weight": "scale", "reason": REFUSED, "error": "dtype mismatch"}
    ignored = {"weight": "l1.bias", "reason": IGNORED}
    servers = server_lines([folded, refused, ignored])
    assert servers[0].startswith(
        "what a server sees: a server that loads its new state dict with load_constants(..., "
        "check_full_update=True) fails on 'l2.bias'; one that loads only"
    )
    assert servers[1:] == [
        "what a server sees: a server's load_constants raises on 'scale'",
        "what a server sees: a server's load_constants succeeds, and the engine keeps "
        "answering with the compiled 'l1.bias'",
    ]
    moved = {"weight": "l1.weight", "reason": DIFFERS}
    assert finding_line(moved) == (
        "'l1.weight': load_constants accepts a new value, and the engine's answer moves with "
        "it but not to eager's"
    )
    together = {"weight": "weight set 0", "reason": DIFFERS, "together": True, "error": "x"}
    assert finding_line(together) == (
        "'weight set 0': the engine takes every weight and differs from eager holding the "
        "same weights, and no single weight's swap alone differs: x"
    )
    assert remedy_lines([folded], runtime_folding=False) == [FOLDING_REMEDY]
    assert remedy_lines([folded], runtime_folding=True) == [OTHER_REMEDY]
    assert remedy_lines([ignored], runtime_folding=False) == [OTHER_REMEDY]


def part(**fields: Any) -> dict[str, Any]:
    return {
        "mode": "swap",
        "planned": 3,
        "ran": 1,
        "stopped": "a finding",
        "findings": [{"weight": "l2.bias", "reason": FOLDED, "error": "Constant not found"}],
        "difference": {"set": 0, "max_abs": 0.126, "location": "output"},
        **fields,
    }


def test_the_failure_text() -> None:
    lines = failure_text(part()).splitlines()
    assert lines[0] == "weight swap: the engine cannot take 1 weight: 'l2.bias'"
    assert lines[3] == (
        "measured: after the swap of weight set 0, the engine differs from eager holding "
        "the same weights by up to 0.126 (output)"
    )
    assert lines[4] == FOLDING_REMEDY
    assert lines[5].startswith("weight sets: 1 of 3 compared (stopped: a finding); ")


class Record:
    def __init__(self, test: str, program: str, fields: Any, outcome: str = "passed") -> None:
        self.label, self.program, self.device, self.outcome = test, program, "cpu", outcome
        self.other_fields = {"weights": fields}


def test_the_summary_names_each_program_s_weights_once() -> None:
    terminal = SectionLines()
    write_weights_hazards(
        terminal,
        [
            Record("t.py::test_a[cpu]", "k1", part()),
            Record("t.py::test_b[cpu]", "k1", part()),  # the same program: shown once
            Record("t.py::test_c[cpu]", "k2", part(), outcome="failed"),  # its failure says it
            Record("t.py::test_d[cpu]", "k3", part(findings=[])),
            Record("t.py::test_e[cpu]", "k4", None),
        ],
    )
    assert terminal.lines[0] == ("--- aoti: weights a server cannot swap (1 program; not failures)")
    assert terminal.lines[1] == (
        "t.py::test_a[cpu]: weight swap: the engine cannot take 1 weight: 'l2.bias'"
    )
    assert FOLDING_REMEDY in "\n".join(terminal.lines)
    assert not [line for line in terminal.lines if "test_b" in line or "test_c" in line]
    empty = SectionLines()
    write_weights_hazards(empty, [Record("t.py::test_d[cpu]", "k3", part(findings=[]))])
    assert empty.lines == []


def test_the_summary_groups_a_programs_weights_by_kind() -> None:
    """One line per kind (its count and first names); a line of its own only to a weight
    whose swap moved the engine's answers; the failure text keeps every name."""
    folded = [
        {"weight": f"w{i}", "reason": FOLDED, "error": "Constant not found"} for i in range(8)
    ]
    moved = {"weight": "head.bias", "reason": DIFFERS}
    terminal = SectionLines()
    write_weights_hazards(
        terminal, [Record("t.py::test_a[cpu]", "k1", part(findings=[*folded, moved]))]
    )
    assert terminal.lines[1] == (
        "t.py::test_a[cpu]: weight swap: the engine cannot take 9 weights: 'w0', 'w1', 'w2' "
        "and 6 more"
    )
    assert terminal.lines[2] == (
        "    8 folded into the compiled code (not among get_constant_fqns()): the engine keeps "
        "their compiled values: 'w0', 'w1', 'w2' and 5 more"
    )
    assert terminal.lines[3] == f"    {finding_line(moved)}"
    assert not [line for line in terminal.lines if "'w3'" in line]
    assert "'w7'" in failure_text(part(findings=[*folded, moved]))


def test_the_junit_properties() -> None:
    assert weights_properties({"weights": None}) == []
    assert weights_properties({"weights": {"skipped": "buffer state", "findings": []}}) == []
    assert weights_properties({"weights": part()}) == [
        ("aoti_weights_sets", 1),
        ("aoti_weights_findings", 1),
        ("aoti_weights_cannot_swap", "l2.bias"),
    ]


@pytest.mark.parametrize("mode", ["swap", "report", "off"])
def test_the_option_takes_three_modes(mode: str) -> None:
    (row,) = WEIGHTS.rows()
    assert row.name == "aoti-weights" and row.default == "report"
    assert row.parse is not None and row.parse(mode.upper()) == mode


@pytest.mark.parametrize(("mode", "swapped"), [("report", False), ("swap", True)])
def test_a_program_the_engine_child_serves_is_swapped_only_when_asked(
    mode: str, swapped: bool
) -> None:
    """A large program's one engine lives in the engine child: by default its weights are
    not swapped here (no second load, no more copies), and the record says why;
    ``weights="swap"`` swaps them whatever the cost."""
    from types import SimpleNamespace

    from pytest_aoti.checks.budget import CheckBudget, left_by_search
    from pytest_aoti.options.check_options import CheckOptions
    from pytest_aoti.weights.check import SERVED, _Swap
    from pytest_aoti.weights.feature import WeightsOptions

    asked: list[str] = []

    def local_engine() -> object:
        asked.append("engine")
        return object()  # no load_constants: the swap stops right after asking

    options = CheckOptions().with_features({WeightsOptions: WeightsOptions(weights=mode)})
    module = torch.nn.Linear(2, 2)
    example = (torch.ones(1, 2),)
    plan = SimpleNamespace(options=options, input_sets=[(example, {})], module=module)
    context = SimpleNamespace(
        program=SimpleNamespace(
            mutated_buffers=frozenset(), exported=torch.export.export(module, example)
        ),
        another_load_over_budget=lambda: True,
        local_engine=local_engine,
        budget=CheckBudget.of(0.05, program_bytes=2**25),
    )
    swap = _Swap(plan, context)  # type: ignore[arg-type]
    swap.run()
    assert asked == (["engine"] if swapped else [])
    assert (swap.part().get("skipped") == SERVED) is not swapped
    if not swapped:
        assert left_by_search(context.budget.to_json(), "off") == {"weights": 3}
