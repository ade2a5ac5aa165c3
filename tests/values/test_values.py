"""Generated values: a program wrong only on values the example never held fails by default,
naming the input, the element and its value; ``values="off"`` restores the example-only check.

The fault is the suite's own, so the test holds on every torch: an Inductor post-grad pass
that rewrites float floor division into ``floor(a / b)``, wrong only where ``a / b`` rounds
to an integer (``1.0 // 0.1`` is 9 in eager, ``floor(1.0 / 0.1)`` is 10). ``torch.randn``
inputs never show it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from listings import LISTINGS, assert_listing, mask_figures

from pytest_aoti.checks import budget as budget_module
from pytest_aoti.torch_bugs import NEXTAFTER_STEPS_A_FLOAT32_ULP
from pytest_aoti.values.draws import draw_seed, make_draw, tie_dependent

FLOOR_OF_QUOTIENT = """
from torch._inductor.custom_graph_pass import CustomGraphPass


class FloorOfQuotient(CustomGraphPass):
    def __call__(self, graph):
        for node in list(graph.nodes):
            if (
                node.op == "call_function"
                and node.target is torch.ops.aten.div.Tensor_mode
                and node.kwargs.get("rounding_mode") == "floor"
            ):
                with graph.inserting_before(node):
                    quotient = graph.call_function(torch.ops.aten.div.Tensor, node.args)
                    floor = graph.call_function(torch.ops.aten.floor.default, (quotient,))
                node.replace_all_uses_with(floor)
                graph.erase_node(node)

    def uuid(self):
        return "test_values.FloorOfQuotient-1"


class FloorDivide(torch.nn.Module):
    def forward(self, a, b):
        return torch.floor_divide(a, b) * 2 + 1


CONFIGS = {"post_grad_custom_post_pass": FloorOfQuotient()}


def inputs():
    torch.manual_seed(0)
    return torch.randn(4, 8), torch.randn(4, 8)


def test_default(aoti):
    aoti.check(FloorDivide(), inputs(), inductor_configs=CONFIGS)


def test_off(aoti):
    result = aoti.check(FloorDivide(), inputs(), inductor_configs=CONFIGS, values="off")
    assert "values" not in result.checks


@pytest.mark.aoti(values_draws=0)
def test_no_draws(aoti):
    aoti.check(FloorDivide(), inputs(), inductor_configs=CONFIGS)


class MulAdd(torch.nn.Module):
    def forward(self, a, b):
        return a * b + 1


def test_correct_program(aoti):
    result = aoti.check(MulAdd(), inputs())
    assert "values" in result.checks
"""


@pytest.mark.compiles
def test_a_program_wrong_only_on_exact_decimals_fails_by_default_naming_the_values(
    run_aoti: Callable[..., pytest.RunResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = tmp_path / "aoti.json"
    result = run_aoti(FLOOR_OF_QUOTIENT, f"--aoti-report={report}", "--aoti-probes=off")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_default*",
            "E * the AOTI compile broke it: values draw * fails: *[[]*] = *",
            "E *first difference: output differs between eager and the AOTI engine (values draw *)*",
            "E *element(s) differ from the plain draw",
            "E *replay: run the test again, or values='off' to leave the check out",
            "E *stage: compile: *",
            "E *first diverging node: * = aten.div.Tensor_mode(*",
        ]
    )
    compare_listing(result.stdout.lines)
    records = {r["test"].split("::")[-1]: r for r in json.loads(report.read_text())["checks"]}
    failed = records["test_default[cpu]"]["finding"]["extra"]["values"]
    assert failed["failed_draw"] >= 0 and failed["elements"], failed
    passed = dict(records["test_correct_program[cpu]"]["values"])
    assert passed.pop("seconds") > 0, "the check's time is a figure of its own"
    pairs_met = passed.pop("pairs_met")
    assert passed == {
        "draws": 16,
        "meeting": 8,
        "checked": 16,
        "kept": 0,
        "left": 0,
        "given": False,
        "refused": 0,
        "steps": None,
        "constants": [],
        "positions": [],
    }
    # two (4, 8) inputs, 7 classes each, rows shorter than a vector (16 float32 lanes
    # here): every pair meets in the scalar tail; the single elements take what the draws
    # leave, the four pairs of the zeros first
    assert pairs_met["tail"] == [49, 49] and set(pairs_met) == {"first", "tail", "last"}
    assert pairs_met["last"][0] >= 4 and pairs_met["first"][0] >= 4
    assert records["test_off[cpu]"]["values"] is None
    assert records["test_no_draws[cpu]"]["values"] is None

    # again: the passed draws are kept with the package, not run again; the failing draw
    # is tried first and fails again
    again = run_aoti(FLOOR_OF_QUOTIENT, f"--aoti-report={report}", "--aoti-probes=off")
    again.assert_outcomes(passed=3, failed=1)
    again.stdout.fnmatch_lines(["E * the AOTI compile broke it: values draw * fails: *[[]*] = *"])
    records = {r["test"].split("::")[-1]: r for r in json.loads(report.read_text())["checks"]}
    kept = records["test_correct_program[cpu]"]
    assert {k: kept["values"][k] for k in ("checked", "kept")} == {"checked": 0, "kept": 16}
    assert kept["budget"]["checks"]["values"] == {
        "ran": 0,
        "planned": 16,
        "stopped": "",
        "given": False,
        "earlier": 16,
        "left": 0,
        "runs": 1,
    }
    assert (
        records["test_default[cpu]"]["finding"]["extra"]["values"]["failed_draw"]
        == failed["failed_draw"]
    )

    # a program the budget allows no draw: the draw that failed still runs
    monkeypatch.setattr(budget_module, "LARGE_FROM_BYTES", 0)
    monkeypatch.setattr(budget_module, "READ_ALLOWANCE_BYTES", 0)
    spent = run_aoti(
        FLOOR_OF_QUOTIENT, f"--aoti-report={report}", "--aoti-probes=off", "--aoti-budget=0.05"
    )
    spent.assert_outcomes(passed=3, failed=1)
    records = {r["test"].split("::")[-1]: r for r in json.loads(report.read_text())["checks"]}
    assert (
        records["test_default[cpu]"]["finding"]["extra"]["values"]["failed_draw"]
        == failed["failed_draw"]
    )
    assert records["test_correct_program[cpu]"]["values"]["checked"] == 0


def test_the_option_is_checked_before_anything_is_exported(
    run_aoti: Callable[..., pytest.RunResult],
) -> None:
    result = run_aoti(
        """
        def test_bad(aoti):
            aoti.check(torch.nn.Linear(2, 2), (torch.randn(1, 2),), values="all")

        def test_bad_skip(aoti):
            aoti.check(torch.nn.Linear(2, 2), (torch.randn(1, 2),), values_skip="x")
        """
    )
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*values must be one of domain, edge, off, got 'all'*"])
    result.stdout.fnmatch_lines(["*values_skip= takes a set of input names*"])
    assert "compiling" not in result.stdout.str()


SIGNED_ZEROS = """
from torch._inductor.custom_graph_pass import CustomGraphPass


class MinimumBySign(CustomGraphPass):
    \"\"\"minimum(x, y) as where(x <= y, x, y): on equal values it returns x where eager
    returns y, which differs only for zeros of opposite signs.\"\"\"

    def __call__(self, graph):
        for node in list(graph.nodes):
            if node.op == "call_function" and node.target is torch.ops.aten.minimum.default:
                x, y = node.args
                with graph.inserting_before(node):
                    less = graph.call_function(torch.ops.aten.le.Tensor, (x, y))
                    picked = graph.call_function(torch.ops.aten.where.self, (less, x, y))
                node.replace_all_uses_with(picked)
                graph.erase_node(node)

    def uuid(self):
        return "test_values.MinimumBySign-2"


class Reciprocal(torch.nn.Module):
    def forward(self, x, y):
        return 1 / torch.minimum(x, y)


def test_floor_sixteen(aoti):
    torch.manual_seed(0)
    aoti.check(FloorDivide(), (torch.randn(16), torch.randn(16)), inductor_configs=CONFIGS)


def test_minimum_sixteen(aoti):
    torch.manual_seed(0)
    aoti.check(
        Reciprocal(),
        (torch.randn(16), torch.randn(16)),
        inductor_configs={"post_grad_custom_post_pass": MinimumBySign()},
    )
"""


@pytest.mark.compiles
@pytest.mark.parametrize("beside", [False, True], ids=["one-after-the-other", "side-by-side"])
def test_faults_where_two_inputs_meet_fail_on_sixteen_element_inputs(
    run_aoti: Callable[..., pytest.RunResult], monkeypatch: pytest.MonkeyPatch, beside: bool
) -> None:
    """Each draw puts every pair of special-point classes of two inputs at one position:
    an integer over an exact decimal, and -0.0 against +0.0; found alike where the engine
    child makes its calls beside eager's (cores to spare) and where they take turns."""
    from pytest_aoti.api import CheckContext

    # every search of the inner run takes this answer (the probes are off)
    monkeypatch.setattr(CheckContext, "child_beside", staticmethod(lambda: beside))
    source = FLOOR_OF_QUOTIENT.split("def test_default")[0] + SIGNED_ZEROS
    result = run_aoti(source, "--aoti-probes=off")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        ["E * values draw * fails: a[[]*] = *, b[[]*] = *", "E *first diverging node: *"]
    )
    result.stdout.fnmatch_lines(["E * values draw * fails: x[[]*] = *0.0, y[[]*] = *0.0"])


LISTING = LISTINGS / "values-failure.txt"
"""The values page's failure listing; written again with ``AOTI_REGENERATE_LISTINGS=1``."""


def masked(line: str) -> str:
    """A listing line with its elements and figures masked: another torch gives the program
    another key, hence other draws."""
    line = re.sub(r"\w+\[[\d, ]+\] = [-\d.e+]+(, \w+\[[\d, ]+\] = [-\d.e+]+)*", "ELEMENTS", line)
    return mask_figures(line)


def compare_listing(lines: list[str]) -> None:
    start = next(i for i, line in enumerate(lines) if "fails: " in line and "values draw" in line)
    assert_listing(lines[start : start + 4], LISTING, masked)


def named(*tensors: torch.Tensor) -> dict[str, torch.Tensor]:
    return {f"x{i}": tensor for i, tensor in enumerate(tensors)}


def test_draws_keep_shape_dtype_layout_and_range_and_are_the_same_every_run() -> None:
    example = named(
        torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),
        torch.arange(3, 9),
        torch.tensor([True, False]),
        torch.randn(6, dtype=torch.float16),
    )
    seed = draw_seed("test_x[cpu]", "abc", 3)
    assert seed == draw_seed("test_x[cpu]", "abc", 3) != draw_seed("test_x[cpu]", "abc", 4)
    first = make_draw(3, seed, example, no_repeats=False)
    again = make_draw(3, seed, example, no_repeats=False)
    for name, tensor in example.items():
        drawn = first.values[name]
        assert torch.equal(drawn, again.values[name])
        assert drawn.shape == tensor.shape and drawn.dtype == tensor.dtype
        assert drawn.stride() == tensor.stride()
        assert not torch.equal(drawn, tensor) or tensor.dtype == torch.bool
        if tensor.dtype != torch.bool:
            assert tensor.min() <= drawn.min() and drawn.max() <= tensor.max()
        # the plain draw differs from the draw exactly where points were overlaid
        differs = first.plain_values[name] != drawn
        assert not (differs & ~first.masks[name].to(differs.device)).any()


def test_draws_mix_in_exact_decimals_halves_integers_and_signed_zeros() -> None:
    example = named(torch.linspace(-3, 3, 64))
    points: set[float] = set()
    negative_zero = False
    for index in range(16):
        draw = make_draw(index, draw_seed("t", "k", index), example, no_repeats=False)
        values = draw.values["x0"][draw.masks["x0"]]
        points |= {round(v, 6) for v in values.tolist()}
        negative_zero |= bool(((values == 0) & torch.signbit(values)).any())
    assert {0.1, 0.5, 1.0, -0.2, 0.333333} <= points
    assert negative_zero


def test_a_program_with_tie_dependent_ops_gets_no_repeated_values() -> None:
    class TopTwo(torch.nn.Module):
        def forward(self, x):
            return x.topk(2).indices

    exported = torch.export.export(TopTwo(), (torch.randn(2, 16),))
    assert tie_dependent(exported)
    example = named(torch.randn(2, 16))
    for index in range(8):
        values = make_draw(index, index, example, no_repeats=True).values["x0"]
        assert values.flatten().unique().numel() == values.numel()
    assert not tie_dependent(torch.export.export(torch.nn.ReLU(), (torch.randn(2),)))


def test_skipped_inputs_and_non_tensors_keep_the_example_values() -> None:
    example = {"x": torch.randn(3), "positions": torch.tensor([4, 5]), "n": 3}
    draw = make_draw(0, 1, example, no_repeats=False, keep={"positions"})
    assert draw.values["positions"] is example["positions"]
    assert draw.values["n"] == 3 and set(draw.masks) == {"x"}


@pytest.mark.compiles
@pytest.mark.skipif(
    not NEXTAFTER_STEPS_A_FLOAT32_ULP.measured_in(),
    reason=f"measured only on {', '.join(NEXTAFTER_STEPS_A_FLOAT32_ULP.measured)}",
)
def test_the_fp64_rule_never_rescues_an_op_whose_meaning_is_the_dtype_s_precision(
    run_aoti: Callable[..., pytest.RunResult],
) -> None:
    """nextafter on float16 (pytorch/pytorch#187340): the engine steps a float32 ulp, and the
    float64 reference is closer to that than float16 eager is, so the rule would pass it."""
    result = run_aoti(
        """
        class NextAfter(torch.nn.Module):
            def forward(self, x, y):
                z = torch.nextafter(x, y)
                return z - x, z == x

        def test_nextafter(aoti):
            x = torch.linspace(0.5, 2.0, 16, dtype=torch.float16)
            aoti.check(NextAfter(), (x, x + 1), values="off", probes="off")
        """
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E * the AOTI compile broke it: output[[]*] differs between eager and the AOTI engine*",
            "E *fp64 check unavailable: the program calls nextafter, whose result depends on "
            "the dtype's precision: float64 is no reference for it",
        ]
    )
