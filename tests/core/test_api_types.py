"""The value types `pytest_aoti.api` offers a feature plugin, each answering as the core's
function it stands for (no compile: an exported program at most)."""

from __future__ import annotations

import argparse
import operator
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from pytest_aoti import api
from pytest_aoti.compiling.graph_ops import first_call_of
from pytest_aoti.compiling.vec_isa import loop_width
from pytest_aoti.options.fields import per_check_rows
from pytest_aoti.plugins import default_catalog
from pytest_aoti.shapes.read import read_program_shapes


def test_a_value_kind_parses_the_command_line_and_checks_a_call() -> None:
    assert api.ValueKind.SWITCH.parse("on") is True
    assert api.ValueKind.BYTES.parse("2KiB") == 2048
    assert api.ValueKind.NON_NEGATIVE.check("draws", 0) == 0
    with pytest.raises(api.ValueKind.Problem, match="draws must be a positive int, got 0"):
        api.ValueKind.COUNT.check("draws", 0)
    with pytest.raises(argparse.ArgumentTypeError, match="expected one of off, read, readwrite"):
        api.ValueKind.CACHE_MODE.parse("write")


def test_an_option_of_a_kind_takes_its_parser_and_its_check() -> None:
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Options:
        level: int = api.per_check(1, "A level.", kind=api.ValueKind.COUNT, marker=True)
        mode: str = api.per_check("a", "A mode.", kind=api.ValueKind.words("a", "b"))
        quiet: int = api.per_check(0, "Checked only.", check=api.ValueKind.NON_NEGATIVE.check)

    level, mode, quiet = per_check_rows(Options)
    assert (level.name, level.parse, level.check) == (
        "aoti-level",
        api.ValueKind.COUNT.parse,
        api.ValueKind.COUNT.check,
    )
    assert mode.parse is not None and mode.parse("B") == "b"
    assert quiet.parse is None  # a keyword only: no command-line option
    assert quiet.check is api.ValueKind.NON_NEGATIVE.check


def test_a_finding_kind_says_whether_attribution_replays_it_and_a_bundle_reproduces_it() -> None:
    assert api.FindingKind.OUTPUT.is_parity and api.FindingKind.OUTPUT.reproducible
    assert not api.FindingKind.BUFFER.is_parity and api.FindingKind.BUFFER.reproducible
    assert not api.FindingKind.SIGNATURE.is_parity and not api.FindingKind.SIGNATURE.reproducible
    assert not api.FindingKind("a_feature_kind").reproducible


def test_a_comparison_judges_under_its_tolerance() -> None:
    eager = torch.tensor([1.0, 2.0])
    close = api.Comparison(api.Tolerance(atol=0.1))
    [stats] = close.trees((eager,), (eager + 0.05,), what="output")
    assert stats.location == "output[0]" and stats.max_abs == pytest.approx(0.05)
    with pytest.raises(api.AotiCheckError, match="output differs"):
        api.Comparison(api.Tolerance(rtol=0.0, atol=0.0)).leaf(
            eager, eager + 0.05, location="output"
        )
    assert close.mismatches(eager, torch.tensor([1.0, 3.0]))[0] == 1
    assert api.Comparison.same((eager, 1), (eager.clone(), 1))
    assert not api.Comparison.same((eager,), (eager.double(),))
    assert api.Comparison.differences(eager, torch.tensor([1.0, 2.5])).tolist() == [0.0, 0.5]


class _Two(torch.nn.Module):
    def forward(self, x: torch.Tensor, *, y: torch.Tensor, z: torch.Tensor) -> Any:
        return x + y * z


def test_a_program_call_names_flattens_orders_and_finds_aliases() -> None:
    x = torch.ones(2)
    exported = torch.export.export(_Two(), (x,), {"y": torch.ones(2), "z": torch.ones(2)})
    call = api.ProgramCall(exported)
    y, z = torch.full((2,), 2.0), torch.full((2,), 3.0)
    assert call.names == ("x", "y", "z")
    assert list(call.ordered_kwargs({"z": z, "y": y})) == ["y", "z"]
    assert [leaf is want for leaf, want in zip(call.flat((x,), {"z": z, "y": y}), (x, y, z))] == [
        True,
        True,
        True,
    ]
    assert call.named((x,), {"z": z, "y": y})["z"] is z
    assert call.aliased((x,), {"y": x, "z": z}) == [["x", "y"]]
    with pytest.raises(ValueError, match="y"):
        call.named((x,), {"z": z})


def test_a_node_target_answers_what_the_node_calls() -> None:
    view = api.AotiProgram.NodeTarget(torch.ops.aten.view.default)
    assert view.aten is torch.ops.aten.view.default and view.is_view
    assert view.name == "aten.view.default"
    assert [argument.name for argument in view.arguments][:1] == ["self"]
    getitem = api.AotiProgram.NodeTarget(operator.getitem)
    assert (getitem.aten, getitem.is_view, getitem.name, getitem.arguments) == (
        None,
        False,
        "getitem",
        (),
    )
    assert api.AotiProgram.NodeTarget(torch.ops.higher_order.cond).control_flow == "cond"

    class Top(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return torch.topk(x, 2).values

    graph = torch.export.export(Top(), (torch.arange(5.0),)).graph
    assert (
        api.AotiProgram.NodeTarget.first_call_in(graph, ["topk"])
        == first_call_of(graph, ["topk"])
        == "topk"
    )


class _Rows(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        return x * 2


def test_a_programs_shapes_give_sizes_boundaries_and_a_strategy() -> None:
    from hypothesis import given, settings

    rows = torch.export.Dim("rows", min=2, max=9)
    exported = torch.export.export(_Rows(), (torch.ones(4, 3),), dynamic_shapes=({0: rows},))
    shapes = read_program_shapes(exported)
    [symbol] = shapes.symbols
    assert shapes.boundary_assignments(64) == [{symbol: 2}, {symbol: 9}]
    assert shapes.sizes_at({symbol: 5}) == {"x": (5, 3)}
    seen: list[int] = []

    @settings(max_examples=20, database=None)
    @given(shapes.assignments(64))
    def drawn(values: dict[str, int]) -> None:
        seen.append(values[symbol])

    drawn()
    assert seen and all(2 <= value <= 9 for value in seen)


def test_the_input_builder_draws_values_laid_out_like_an_example() -> None:
    expanded = torch.arange(3.0).reshape(3, 1).expand(3, 4)
    assert api.InputBuilder.distinct_shape(expanded) == (3, 1)
    assert api.InputBuilder.has_own_elements(expanded)
    assert not api.InputBuilder.has_own_elements(torch.arange(6.0).unfold(0, 3, 1))
    laid = api.InputBuilder.laid_out_like(torch.tensor([[7.0], [8.0], [9.0]]), expanded)
    assert laid is not None and laid.stride() == expanded.stride() and laid[2, 3] == 9.0
    like = api.InputBuilder.distinct_like(torch.tensor([1.0, 5.0]), seed=1)
    assert like.shape == (2,) and api.InputBuilder.value_range(torch.tensor([1.0, 5.0])) == (
        1.0,
        5.0,
    )


def test_a_program_says_its_engines_loop_width() -> None:
    # loop_width reads only the program's device: a stand-in holds one
    on = api.AotiProgram.loop_width
    assert on(SimpleNamespace(device=torch.device("cuda")), torch.float32) == 0  # type: ignore[arg-type]
    here = on(SimpleNamespace(device=torch.device("cpu")), torch.float32, 64)  # type: ignore[arg-type]
    assert here >= 1 and here in {loop_width(torch.float32, None, 64), *_recorded_widths()}
    without_a_program = api.AotiProgram.cpu_loop_width(torch.float32, 64)
    assert without_a_program == loop_width(torch.float32, None, 64), "the ISA detected here"


def _recorded_widths() -> set[int]:
    from pytest_aoti.compiling.machine import settled_target

    target = settled_target()
    return (
        {loop_width(torch.float32, target.isa, 64)} if target is not None and target.isa else set()
    )


def test_the_catalog_lists_what_aoti_check_takes() -> None:
    keywords = default_catalog().check_keywords()
    assert keywords[:2] == ("mutates", "mutated_buffers")
    assert {"samples", "steps", "next_inputs", "rtol", "values_draws"} <= set(keywords)
    assert "max_dim" not in keywords  # a marker option only


def test_the_report_collector_makes_and_writes_the_json_document(tmp_path: Any) -> None:
    import json

    collector = api.ReportCollector()
    document = collector.document(
        devices=["cpu"], totals={"programs": 0}, created="t", torch="2", build="b"
    )
    assert document["version"] == api.ReportCollector.VERSION
    assert (document["checks"], document["compiles"], document["devices"]) == ([], [], ["cpu"])
    path = tmp_path / "report.json"
    api.ReportCollector.write(path, document)
    assert json.loads(path.read_text()) == document
    assert api.ProgramRegistry.CompileStats(
        programs={"k"}, compiled=1, compile_seconds=2.0
    ).summary_line() == ("aoti: 1 program; 1 compiled in 2.0 s; 0 loaded from cache in 0.00 s")


def test_the_context_and_the_error_types_offer_the_core_s_services() -> None:
    from pytest_aoti.checks.module_copy import copy_module
    from pytest_aoti.compiling.machine import machine_identity
    from pytest_aoti.errors import install_hint
    from pytest_aoti.findings import FindingKind
    from pytest_aoti.isolation.process import side_by_side
    from pytest_aoti.trees import relaid, tensor_bytes

    assert api.AotiUsageError.install_hint("s3") == install_hint("s3")
    modes = api.ValueKind.words("fail", "report", quoted=True)
    assert (modes.parse("FAIL"), modes.check("mode", " report ")) == ("fail", "report")
    with pytest.raises(api.ValueKind.Problem, match="'fail', 'report'"):
        modes.check("mode", "loud")
    assert api.AotiProgram.machine_identity() == machine_identity()
    assert api.CheckContext.child_beside() == side_by_side()
    module = torch.nn.Linear(2, 3)
    copied = api.CheckContext.copy_module(module)
    assert copied is not module and torch.equal(copied.weight, copy_module(module).weight)
    eager = api.CheckContext.eager_module(module)
    assert eager is not module and eager.weight is module.weight, "the caller's Parameters"
    inputs = ((torch.ones(2, 3, 4, 5),), {"scale": torch.ones(3, dtype=torch.float64)})
    assert api.InputBuilder.tensor_bytes(inputs) == tensor_bytes(inputs) == 480 + 24
    laid = api.InputBuilder.relaid(inputs[0][0], "channels_last")
    assert laid is not None and laid.stride() == relaid(inputs[0][0], "channels_last").stride()
    finding = api.Finding.plain("threads", "differs\n  at call 2", "output")
    assert (finding.kind, finding.message, finding.details) == (
        FindingKind("threads"),
        "differs",
        ("at call 2",),
    )
