"""The ``layouts`` option: the check again on a program compiled from the example relaid in
each named layout, each a program of its own, one failure that says in which layouts.

The compiling test's fault is the suite's own, so it holds on every torch: an Inductor
post-grad pass that adds 0.5 to the output of a program whose input is a 4-D channels_last
tensor, and leaves every other program alone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_aoti.checks.base import CheckPlan, CheckResult
from pytest_aoti.errors import AotiCheckError, AotiCompileError
from pytest_aoti.findings import layouts_lead
from pytest_aoti.options.check_options import CheckOptions
from pytest_aoti.options.parsers import ValueProblem, check_layouts, parse_layouts
from pytest_aoti.plugins import default_catalog
from pytest_aoti.reports.junit import check_properties
from pytest_aoti.reports.records import CheckRecord
from pytest_aoti.reports.terminal import layout_lines
from pytest_aoti.run.runner import CallRunner, relaid_plan
from pytest_aoti.trees import LAYOUTS, relaid, relaid_tree

# --- names -------------------------------------------------------------------------------

RUN = default_catalog()
"""A run of every default plugin."""


def test_a_comma_list_is_a_tuple_and_none_is_off() -> None:
    assert parse_layouts("channels_last, Permuted") == ("channels_last", "permuted")
    assert parse_layouts("none") == ()
    assert parse_layouts("") == ()


@pytest.mark.parametrize("text", ["nchw", "channels_last,nhwc"])
def test_an_unknown_name_lists_the_valid_ones(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="use channels_last, channels_last_3d, "):
        parse_layouts(text)


def test_a_name_given_twice_is_refused() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="listed twice"):
        parse_layouts("permuted,permuted")


def test_a_marker_or_call_takes_names_or_one_name() -> None:
    assert check_layouts("layouts", ("channels_last",)) == ("channels_last",)
    assert check_layouts("layouts", "permuted") == ("permuted",)
    assert check_layouts("layouts", {"permuted", "channels_last"}) == ("channels_last", "permuted")
    for bad in (3, ["nchw"], {"channels_last": True}):
        with pytest.raises(ValueProblem, match="layouts must be layout names"):
            check_layouts("layouts", bad)


# --- relaying ------------------------------------------------------------------------------


def test_each_layout_applies_to_its_ranks_and_keeps_the_values() -> None:
    four, five, two = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 2, 4, 5), torch.randn(3, 4)
    made = relaid(four, "channels_last")
    assert made is not None and made.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(made, four)
    made = relaid(five, "channels_last_3d")
    assert made is not None and made.is_contiguous(memory_format=torch.channels_last_3d)
    assert relaid(two, "channels_last") is None and relaid(four, "channels_last_3d") is None
    for tensor in (two, four, five):
        made = relaid(tensor, "permuted")
        assert made is not None and torch.equal(made, tensor)
        assert made.stride()[-2:] == (1, tensor.shape[-2])  # the last two dims swapped
        assert made.transpose(-1, -2).is_contiguous()
    assert relaid(torch.randn(5), "permuted") is None
    with pytest.raises(ValueError, match="unknown layout"):
        relaid(four, "nhwc")
    assert set(LAYOUTS) == {"channels_last", "channels_last_3d", "permuted"}


def test_a_tree_is_relaid_where_its_tensors_take_the_layout() -> None:
    image, flat = torch.randn(2, 3, 4, 4, requires_grad=True), torch.randn(4)
    tree = ((image, flat, 3), {"scale": 0.5})
    (args, kwargs), changed = relaid_tree(tree, "channels_last")
    assert changed and kwargs == {"scale": 0.5} and args[2] == 3
    assert args[1] is flat  # no layout of its rank: the same tensor
    assert args[0].is_contiguous(memory_format=torch.channels_last) and args[0].requires_grad
    assert torch.equal(args[0], image)
    assert not image.is_contiguous(memory_format=torch.channels_last)  # the caller's untouched
    assert relaid_tree(((flat,), {}), "channels_last") == (((flat,), {}), False)


def test_a_layout_that_moves_only_size_one_dims_changes_nothing() -> None:
    single = torch.randn(2, 1, 1, 1)
    (args, _), changed = relaid_tree(((single,), {}), "channels_last")
    assert not changed and args[0] is single


def _plan(*args: Any, layouts: tuple[str, ...] = ("channels_last",)) -> CheckPlan:
    return CheckPlan(
        module=torch.nn.Identity(),
        input_sets=((args, {}), (args, {})),
        tolerance=None,  # type: ignore[arg-type]
        options=CheckOptions(layouts=layouts),
    )


def test_a_layout_plan_relays_every_input_set_and_has_no_layouts_of_its_own() -> None:
    plan = _plan(torch.randn(2, 3, 4, 4))
    relaid = relaid_plan(plan, "channels_last")
    assert relaid is not None and relaid.options.layouts == ()
    assert all(
        args[0].is_contiguous(memory_format=torch.channels_last) for args, _ in relaid.input_sets
    )
    assert relaid_plan(_plan(torch.randn(3, 4)), "channels_last") is None


# --- one check in several layouts ------------------------------------------------------------


class Events:
    """The session's side, as far as the layout runs use it: notes and the running layout."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.layout = ""

    def note(self, message: str) -> None:
        self.notes.append(message)

    @contextlib.contextmanager
    def in_layout(self, layout: str) -> Iterator[None]:
        self.layout = layout
        try:
            yield
        finally:
            self.layout = ""


def _runner(
    monkeypatch: pytest.MonkeyPatch,
    failing: set[str],
    error: Callable[[str], Exception] = AotiCheckError,
) -> tuple[CallRunner, Events, list[str]]:
    """A runner whose one check raises ``error`` where its label's layout is in ``failing``
    ("" for the example's own), and records which runs it made."""
    events = Events()
    runs: list[str] = []
    runner = CallRunner(torch.device("cpu"), registry=None, label="t.py::test")  # type: ignore[arg-type]
    runner.events = events  # type: ignore[assignment]

    def check(self: CallRunner, plan: CheckPlan, started: float) -> CheckResult:
        layout = self.label.removeprefix("t.py::test").strip("[]")
        assert layout == events.layout  # the records name the layout they run in
        assert plan.options.layouts == (() if layout else ("channels_last", "permuted"))
        runs.append(layout)
        if layout in failing:
            raise error(f"output[0] differs in {layout or 'own'}")
        return CheckResult(program=None, stats=())  # type: ignore[arg-type]

    monkeypatch.setattr(CallRunner, "_check", check)
    return runner, events, runs


@pytest.mark.parametrize(
    ("failing", "first_line"),
    [
        (
            {"channels_last"},
            "fails in layout channels_last (passes in the example's own layout and in layout "
            "permuted): output[0] differs in channels_last",
        ),
        (
            {"", "permuted"},
            "fails in the example's own layout and in layout permuted (passes in layout "
            "channels_last): output[0] differs in own",
        ),
        (
            {"", "channels_last", "permuted"},
            "fails in the example's own layout and in layouts channels_last, permuted: "
            "output[0] differs in own",
        ),
    ],
)
def test_every_layout_runs_and_one_failure_says_where_it_failed(
    monkeypatch: pytest.MonkeyPatch, failing: set[str], first_line: str
) -> None:
    runner, _, runs = _runner(monkeypatch, failing)
    plan = _plan(torch.randn(2, 3, 4, 4), layouts=("channels_last", "permuted"))
    with pytest.raises(AotiCheckError) as raised:
        runner.check(plan, 0.0)
    assert runs == ["", "channels_last", "permuted"]  # the example's own layout first
    assert str(raised.value).splitlines()[0] == first_line


def test_a_layout_s_program_that_does_not_compile_is_a_layout_that_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runner, _, runs = _runner(monkeypatch, {"permuted"}, AotiCompileError)
    plan = _plan(torch.randn(2, 3, 4, 4), layouts=("channels_last", "permuted"))
    with pytest.raises(AotiCompileError) as raised:
        runner.check(plan, 0.0)
    assert runs == ["", "channels_last", "permuted"]
    assert raised.value.stage == "compile"
    assert str(raised.value) == (
        "fails in layout permuted (passes in the example's own layout and in layout "
        "channels_last): output[0] differs in permuted"
    )


def test_a_check_that_passes_everywhere_returns_the_own_layout_s_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runner, events, runs = _runner(monkeypatch, set())
    plan = _plan(torch.randn(3, 4), layouts=("channels_last", "permuted"))
    assert isinstance(runner.check(plan, 0.0), CheckResult)
    assert runs == ["", "permuted"]  # no 4-D input: channels_last is not compiled
    assert events.notes == [
        "t.py::test: layout channels_last not compiled: no input of the example is 4-D"
    ]


def test_the_lead_names_where_it_failed_and_where_it_passed() -> None:
    assert layouts_lead(["channels_last"], [""]) == (
        "fails in layout channels_last (passes in the example's own layout)"
    )
    assert layouts_lead([""], ["permuted"]) == (
        "fails in the example's own layout (passes in layout permuted)"
    )


# --- records -------------------------------------------------------------------------------


def _record(layout: str, outcome: str, index: int = 1) -> CheckRecord:
    return CheckRecord(
        test="t.py::test[cpu]",
        device="cpu",
        program="k" + layout,
        cache_hit=False,
        compile_seconds=1.0,
        original_compile_seconds=1.0,
        outcome=outcome,
        check_index=index,
        layout=layout,
    )


def test_a_layout_s_record_names_it_in_its_label_json_and_properties() -> None:
    record = _record("channels_last", "failed")
    assert record.label == "t.py::test[cpu][channels_last]"
    assert _record("permuted", "passed", index=2).label == "t.py::test[cpu][permuted] #2"
    assert CheckRecord.from_json(record.to_json()).layout == "channels_last"
    assert ("aoti_layout", "channels_last") in check_properties(record, RUN)
    assert all(name != "aoti_layout" for name, _ in check_properties(_record("", "passed"), RUN))


def test_the_summary_lists_the_layouts_of_each_failure() -> None:
    records = [
        _record("", "passed"),
        _record("channels_last", "failed"),
        _record("permuted", "passed"),
        _record("", "passed", index=2),
        _record("channels_last", "passed", index=2),
    ]
    assert layout_lines(records) == [
        "t.py::test[cpu] (cpu): fails in layout channels_last (passes in the example's own "
        "layout and in layout permuted)"
    ]
    assert layout_lines([_record("", "failed")]) == []  # no layouts: nothing to say


def test_a_bad_layout_on_the_command_line_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--aoti-layouts=nhwc")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--aoti-layouts: unknown layout 'nhwc': use channels_last, channels_last_3d, permuted*"]
    )


# --- compiled --------------------------------------------------------------------------------

CHANNELS_LAST_ONLY = """
class OffWhenChannelsLast(CustomGraphPass):
    \"\"\"Adds 0.5 to the first output of a program whose input is 4-D channels_last.\"\"\"

    def __call__(self, graph):
        placeholders = [node for node in graph.nodes if node.op == "placeholder"]
        if not any(_channels_last(node.meta.get("val")) for node in placeholders):
            return
        output = next(node for node in graph.nodes if node.op == "output")
        first, *rest = output.args[0]
        with graph.inserting_before(output):
            off = graph.call_function(torch.ops.aten.add.Tensor, (first, 0.5))
        output.args = ((off, *rest),)

    def uuid(self):
        return "test_layouts.OffWhenChannelsLast-1"


def _channels_last(value):
    return (
        isinstance(value, torch.Tensor)
        and value.dim() == 4
        and value.is_contiguous(memory_format=torch.channels_last)
        and not value.is_contiguous()
    )


class Affine(torch.nn.Module):
    def forward(self, x):
        return x * 2 + 1


CONFIGS = {"post_grad_custom_post_pass": OffWhenChannelsLast()}


def image():
    torch.manual_seed(0)
    return (torch.randn(2, 3, 4, 4),)


def test_own_layout(aoti):
    aoti.check(Affine(), image(), inductor_configs=CONFIGS)


def test_channels_last(aoti):
    aoti.check(Affine(), image(), inductor_configs=CONFIGS, layouts=("channels_last",))


@pytest.mark.aoti(layouts=("permuted", "channels_last"))
def test_marked(aoti):
    aoti.check(Affine(), image(), inductor_configs=CONFIGS)
"""


@pytest.mark.compiles
def test_a_fault_of_channels_last_programs_fails_only_with_that_layout(
    run_aoti: Callable[..., pytest.RunResult], pytester: pytest.Pytester, tmp_path: Path
) -> None:
    report = tmp_path / "aoti.json"
    result = run_aoti(CHANNELS_LAST_ONLY, f"--aoti-report={report}", "--aoti-durations=0")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "E * compile broke it: fails in layout channels_last (passes in the example's own "
            "layout): output differs between eager and the AOTI engine: *",
            "E * compile broke it: fails in layout channels_last (passes in the example's own "
            "layout and in layout permuted): output differs between eager and the AOTI engine: *",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*aoti: failures by layout*",
            "*test_channels_last[[]cpu[]] (cpu): fails in layout channels_last (passes in the "
            "example's own layout)",
            "*test_marked[[]cpu[]] (cpu): fails in layout channels_last (passes in the "
            "example's own layout and in layout permuted)",
        ]
    )
    result.stdout.fnmatch_lines(
        ["*failed  test_inner.py::test_channels_last[[]cpu[]][[]channels_last[]] (cpu)"]
    )
    checks = json.loads(report.read_text())["checks"]
    seen = {(c["test"].split("::")[-1], c["layout"]): c["outcome"] for c in checks}
    assert seen == {
        ("test_own_layout[cpu]", ""): "passed",
        ("test_channels_last[cpu]", ""): "passed",
        ("test_channels_last[cpu]", "channels_last"): "failed",
        ("test_marked[cpu]", ""): "passed",
        ("test_marked[cpu]", "permuted"): "passed",
        ("test_marked[cpu]", "channels_last"): "failed",
    }
    assert all(check["check_index"] == 1 for check in checks)  # one aoti.check each
    programs = {check["layout"]: check["program"] for check in checks}
    assert len(set(programs.values())) == 3  # a program per layout, shared by the tests

    # the same option from the ini file; every program comes from the cache
    pytester.makeini("[pytest]\naoti_layouts = channels_last\n")
    from_ini = run_aoti(CHANNELS_LAST_ONLY, "-k", "test_own_layout")
    from_ini.assert_outcomes(failed=1)
    from_ini.stdout.fnmatch_lines(
        ["*fails in layout channels_last*", "aoti: * programs; 0 compiled*"]
    )
