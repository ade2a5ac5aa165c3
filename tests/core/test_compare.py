"""Tests of pytest_aoti.compare: eager-vs-engine comparison of result pytrees."""

from __future__ import annotations

import math
import re
from collections import namedtuple
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from pytest_aoti.compare import (
    assert_unchanged,
    assert_values,
    compare_leaf,
    compare_trees,
    same_answers,
)
from pytest_aoti.errors import AotiCheckError, AotiUsageError
from pytest_aoti.tolerance import LeafStats, Tolerance

FP32_DEFAULT = Tolerance(rtol=1.3e-6, atol=1e-5)


def _message(excinfo: pytest.ExceptionInfo[AotiCheckError]) -> list[str]:
    return str(excinfo.value).splitlines()


class _CountingReference:
    """A reference callable that records how often it was asked."""

    def __init__(self, value: Any) -> None:
        self.value = value
        self.calls = 0

    def __call__(self) -> Any:
        self.calls += 1
        return self.value


# --- Tolerance ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        (torch.float16, (1e-3, 1e-5)),
        (torch.bfloat16, (1.6e-2, 1e-5)),
        (torch.float32, (1.3e-6, 1e-5)),
        (torch.float64, (1e-7, 1e-7)),
        (torch.complex64, (1.3e-6, 1e-5)),
        (torch.complex128, (1e-7, 1e-7)),
    ],
)
def test_default_tolerances_follow_assert_close(
    dtype: torch.dtype, expected: tuple[float, float]
) -> None:
    assert Tolerance().resolve(dtype) == pytest.approx(expected)
    assert not Tolerance().explicit


def test_partial_tolerance_takes_the_dtype_default_for_the_other() -> None:
    assert Tolerance(rtol=0.1).resolve(torch.float32) == pytest.approx((0.1, 1e-5))
    assert Tolerance(atol=0.5).resolve(torch.float64) == pytest.approx((1e-7, 0.5))
    assert Tolerance(rtol=0.1).explicit
    assert Tolerance(atol=0.0).explicit


@pytest.mark.parametrize("bad", [{"rtol": -1e-3}, {"atol": math.nan}, {"atol": "1e-3"}])
def test_tolerance_rejects_nonsense(bad: dict[str, Any]) -> None:
    with pytest.raises(AotiUsageError, match="non-negative"):
        Tolerance(**bad)


# --- floating tolerance ---------------------------------------------------------------


def test_within_default_tolerance_passes() -> None:
    eager = torch.linspace(-3.0, 3.0, 12)
    engine = eager + 5e-6
    [stats] = compare_trees(eager, engine, what="output")
    assert stats.location == "output"
    assert 0.0 < stats.max_abs < 1e-5


def test_beyond_default_tolerance_reports_location_count_and_worst_element() -> None:
    eager = torch.zeros(3, 4)
    engine = eager.clone()
    engine[0, 1] = 1e-3
    engine[1, 2] = 0.5
    engine[2, 3] = -2e-3
    with pytest.raises(AotiCheckError) as excinfo:
        compare_trees({"b": [eager]}, {"b": [engine]}, what="output", context="call 2, sample 1")
    lines = _message(excinfo)
    assert lines[0] == (
        "output['b'][0] differs between eager and the AOTI engine (call 2, sample 1): "
        "3 of 12 elements beyond rtol=1.3e-06, atol=1e-05"
    )
    details = "\n".join(lines[1:])
    assert "shape (3, 4), dtype torch.float32" in details
    assert "mismatched 3 of 12" in details
    assert "max abs error 0.5," in details
    assert "worst at index (1, 2): eager=0 engine=0.5" in details
    assert "rtol=1.3e-06, atol=1e-05 (default for torch.float32)" in details
    assert len(lines) <= 10


def test_no_context_means_no_parentheses() -> None:
    headline = r"^output differs between eager and the AOTI engine: 1 of 1 "
    with pytest.raises(AotiCheckError, match=headline):
        compare_trees(torch.tensor([1.0]), torch.tensor([2.0]), what="output")


def test_explicit_tolerance_widens_and_narrows() -> None:
    eager = torch.tensor([1.0, 2.0])
    engine = torch.tensor([1.01, 2.0])
    compare_trees(eager, engine, what="output", tolerance=Tolerance(atol=0.02))
    with pytest.raises(AotiCheckError, match=r"beyond rtol=0, atol=0\b"):
        compare_trees(eager, eager + 1e-7, what="output", tolerance=Tolerance(rtol=0.0, atol=0.0))
    with pytest.raises(AotiCheckError) as excinfo:
        compare_trees(eager, engine, what="output", tolerance=Tolerance(atol=1e-3))
    assert "(set by the test)" in str(excinfo.value)


def test_relative_tolerance_scales_with_the_eager_value() -> None:
    eager = torch.tensor([1e6, 1.0], dtype=torch.float64)
    compare_trees(
        eager,
        eager + torch.tensor([0.05, 0.0], dtype=torch.float64),
        what="output",
        tolerance=Tolerance(rtol=1e-7, atol=0.0),
    )
    with pytest.raises(AotiCheckError, match=r"1 of 2 elements beyond"):
        compare_trees(
            eager,
            eager + torch.tensor([0.0, 0.05], dtype=torch.float64),
            what="output",
            tolerance=Tolerance(rtol=1e-7, atol=0.0),
        )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_uses_its_own_default(dtype: torch.dtype) -> None:
    eager = torch.tensor([1.0, 2.0, 4.0], dtype=dtype)
    rtol, _ = Tolerance().resolve(dtype)
    compare_trees(eager, eager * (1 + rtol / 4), what="output")
    with pytest.raises(AotiCheckError, match=rf"default for {re.escape(str(dtype))}"):
        compare_trees(eager, eager * (1 + 4 * rtol), what="output")


def test_complex_values_compare_with_tolerance() -> None:
    eager = torch.tensor([1 + 1j, -2 + 0.5j], dtype=torch.complex64)
    compare_trees(eager, eager + 1e-6j, what="output")
    with pytest.raises(AotiCheckError, match=r"1 of 2 elements beyond rtol=1.3e-06, atol=1e-05"):
        compare_trees(eager, eager + torch.tensor([0, 1e-3j], dtype=torch.complex64), what="output")


def test_empty_tensors_pass() -> None:
    [stats] = compare_trees(torch.empty(0, 3), torch.empty(0, 3), what="output")
    assert stats == LeafStats("output", 0.0, 0.0)


def test_eager_output_that_requires_grad_is_fine() -> None:
    eager = torch.ones(3, requires_grad=True) * 2
    compare_trees(eager, torch.full((3,), 2.0), what="output")


# --- NaN and infinity -----------------------------------------------------------------


def test_nan_at_the_same_positions_passes() -> None:
    eager = torch.tensor([1.0, math.nan, 3.0, math.nan])
    [stats] = compare_trees(eager, eager.clone(), what="output")
    assert stats.max_abs == 0.0


def test_nan_on_one_side_fails_and_says_where() -> None:
    eager = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    engine = torch.tensor([[1.0, 2.0], [math.nan, 4.0]])
    with pytest.raises(AotiCheckError) as excinfo:
        compare_trees(eager, engine, what="input 'x'", context="call 1")
    assert _message(excinfo)[0] == (
        "input 'x' differs between eager and the AOTI engine (call 1): 1 of 4 elements are "
        "NaN on one side only, first at index (1, 0): eager=3 engine=nan"
    )
    # a NaN in eager only is as wrong as one in the engine only
    with pytest.raises(AotiCheckError, match=r"NaN on one side only, first at index \(1, 0\)"):
        compare_trees(engine, eager, what="output")


def test_nan_on_one_side_fails_even_with_huge_tolerance() -> None:
    with pytest.raises(AotiCheckError, match="NaN on one side only"):
        compare_trees(
            torch.tensor([1.0]),
            torch.tensor([math.nan]),
            what="output",
            tolerance=Tolerance(rtol=1e9, atol=1e9),
        )


def test_matching_infinities_pass() -> None:
    eager = torch.tensor([math.inf, -math.inf, 1.0])
    [stats] = compare_trees(eager, eager.clone(), what="output")
    assert stats.max_abs == 0.0


@pytest.mark.parametrize(
    ("eager_value", "engine_value"),
    [(math.inf, -math.inf), (math.inf, 3.0e38), (1.0, math.inf)],
)
def test_infinities_must_match_exactly(eager_value: float, engine_value: float) -> None:
    eager = torch.tensor([0.0, eager_value])
    engine = torch.tensor([0.0, engine_value])
    # a generous rtol times an infinite eager value must not swallow the difference
    for tolerance in (Tolerance(), Tolerance(rtol=10.0, atol=10.0)):
        with pytest.raises(AotiCheckError, match=r"1 of 2 elements beyond"):
            compare_trees(eager, engine, what="output", tolerance=tolerance)


def test_infinity_mismatch_is_not_rescued_by_fp64() -> None:
    eager = torch.tensor([1.0, math.inf])
    engine = torch.tensor([1.0, 7.0])
    reference = _CountingReference(torch.tensor([1.0, 7.0], dtype=torch.float64))
    with pytest.raises(AotiCheckError, match=r"(?m)^  fp64 check skipped: infinities differ$"):
        compare_trees(eager, engine, what="output", reference=reference)


# --- integer and bool ------------------------------------------------------------------


def test_integers_compare_exactly() -> None:
    eager = torch.tensor([[10, 20], [30, 40]], dtype=torch.int32)
    compare_trees(eager, eager.clone(), what="output")
    engine = eager.clone()
    engine[1, 0] += 1
    with pytest.raises(AotiCheckError) as excinfo:
        compare_trees(eager, engine, what="output", tolerance=Tolerance(rtol=1.0, atol=10.0))
    lines = _message(excinfo)
    assert lines[0] == (
        "output differs between eager and the AOTI engine: 1 of 4 elements differ "
        "(exact comparison for torch.int32)"
    )
    assert "  worst at index (1, 0): eager=30 engine=31" in lines


def test_bools_compare_exactly() -> None:
    eager = torch.tensor([True, False, True])
    compare_trees(eager, eager.clone(), what="output")
    expected_line = r"2 of 3 elements differ \(exact comparison for torch.bool\)"
    with pytest.raises(AotiCheckError, match=expected_line):
        compare_trees(eager, torch.tensor([False, True, True]), what="output")


# --- shape, dtype, device ----------------------------------------------------------------


def test_shape_mismatch_fails() -> None:
    with pytest.raises(AotiCheckError) as excinfo:
        compare_trees((torch.ones(3, 2),), (torch.ones(2, 2),), what="output", context="call 1")
    assert _message(excinfo) == [
        "output[0] shape differs between eager and the AOTI engine (call 1): "
        "eager torch.Size([3, 2]), engine torch.Size([2, 2])"
    ]


def test_shapes_are_not_broadcast() -> None:
    sizes = re.escape("eager torch.Size([3]), engine torch.Size([1, 3])")
    with pytest.raises(AotiCheckError, match=rf"^output shape differs .*: {sizes}$"):
        compare_trees(torch.ones(3), torch.ones(1, 3), what="output")
    with pytest.raises(AotiCheckError, match="shape differs"):
        compare_trees(torch.tensor(1.0), torch.tensor([1.0]), what="output")


def test_dtype_mismatch_fails_even_for_equal_values() -> None:
    expected_line = (
        r"^output dtype differs between eager and the AOTI engine: "
        r"eager torch.float32, engine torch.float64$"
    )
    with pytest.raises(AotiCheckError, match=expected_line):
        compare_trees(torch.ones(2), torch.ones(2, dtype=torch.float64), what="output")


def test_device_mismatch_fails() -> None:
    with pytest.raises(AotiCheckError, match=r"^output device differs .*: eager cpu, engine meta$"):
        compare_trees(torch.ones(2), torch.empty(2, device="meta"), what="output")


# --- pytrees ------------------------------------------------------------------------------


def test_nested_outputs_report_pytree_paths() -> None:
    eager = (torch.ones(2), {"a": None, "b": [torch.zeros(3), 7]}, "label")
    engine = (torch.ones(2), {"a": None, "b": [torch.zeros(3), 7]}, "label")
    stats = compare_trees(eager, engine, what="output")
    assert [s.location for s in stats] == [
        "output[0]",
        "output[1]['a']",
        "output[1]['b'][0]",
        "output[1]['b'][1]",
        "output[2]",
    ]

    engine[1]["b"][0][2] = 1.0
    with pytest.raises(AotiCheckError, match=r"^output\[1\]\['b'\]\[0\] differs .*: 1 of 3 "):
        compare_trees(eager, engine, what="output")


def test_second_tuple_element_is_reported_by_index() -> None:
    with pytest.raises(AotiCheckError, match=r"^output\[1\] differs"):
        compare_trees(
            (torch.ones(1), torch.ones(1)), (torch.ones(1), torch.zeros(1)), what="output"
        )


def test_named_tuple_fields_appear_in_the_path() -> None:
    Pair = namedtuple("Pair", ["mean", "var"])
    with pytest.raises(AotiCheckError, match=r"^output\.var differs"):
        compare_trees(
            Pair(torch.ones(1), torch.ones(1)), Pair(torch.ones(1), torch.zeros(1)), what="output"
        )


@pytest.mark.parametrize(
    ("eager", "engine"),
    [
        ((torch.ones(1),), [torch.ones(1)]),
        ((torch.ones(1), torch.ones(1)), (torch.ones(1),)),
        ({"a": torch.ones(1)}, {"b": torch.ones(1)}),
        ([torch.ones(1), [torch.ones(1)]], [torch.ones(1), torch.ones(1)]),
    ],
)
def test_structure_mismatch_names_both_structures(eager: Any, engine: Any) -> None:
    with pytest.raises(AotiCheckError) as excinfo:
        compare_trees(eager, engine, what="output", context="sample 0")
    [line] = _message(excinfo)
    assert line.startswith(
        "output structure differs between eager and the AOTI engine (sample 0): eager "
    )
    assert ", engine " in line


def test_structure_message_describes_containers() -> None:
    described = re.escape("eager {'a': Tensor, 'b': (Tensor, int)}, engine [Tensor]")
    with pytest.raises(AotiCheckError, match=described):
        compare_trees({"a": torch.ones(1), "b": (torch.ones(1), 3)}, [torch.ones(1)], what="output")


@pytest.mark.parametrize(
    ("eager", "engine", "tail"),
    [
        ((1,), (2,), "eager 1, engine 2"),
        (("relu",), ("gelu",), "eager 'relu', engine 'gelu'"),
        ((None,), (0,), "eager None, engine 0"),
        (
            (1.5,),
            (1.25,),
            "eager 1.5, engine 1.25 (beyond rtol=1e-07, atol=1e-07: a Python float read from torch.float64)",
        ),
    ],
)
def test_non_tensor_leaves_compare_with_equality(eager: Any, engine: Any, tail: str) -> None:
    compare_trees(eager, eager, what="output")
    expected_line = rf"^output\[0\] differs between eager and the AOTI engine: {re.escape(tail)}$"
    with pytest.raises(AotiCheckError, match=expected_line):
        compare_trees(eager, engine, what="output")


def test_float_nan_leaves_are_equal() -> None:
    [stats] = compare_trees((math.nan,), (math.nan,), what="output")
    assert stats == LeafStats("output[0]", 0.0, 0.0)


def test_tensor_against_non_tensor_leaf_fails() -> None:
    headline = r"^output\[0\] type differs .*: eager Tensor, engine int$"
    with pytest.raises(AotiCheckError, match=headline):
        compare_trees((torch.tensor(1),), (1,), what="output")
    with pytest.raises(AotiCheckError, match=r"eager float, engine Tensor$"):
        compare_leaf(1.0, torch.tensor([1.0]), location="output")


# --- LeafStats ------------------------------------------------------------------------


def test_leaf_stats_figures() -> None:
    eager = torch.tensor([2.0, 0.0, -4.0, 10.0], dtype=torch.float64)
    engine = torch.tensor([2.5, 0.25, -4.0, 10.0], dtype=torch.float64)
    stats = compare_leaf(eager, engine, location="output", tolerance=Tolerance(atol=1.0))
    # rel error ignores the eager zero, where it would be infinite
    assert stats == LeafStats("output", 0.5, 0.25, pytest.approx(0.5 / (1.0 + 1e-7 * 2.0)))


def test_leaf_stats_for_integers_and_exact_matches() -> None:
    ints = torch.tensor([1, 2, 3])
    assert compare_leaf(ints, ints.clone(), location="o") == LeafStats("o", 0.0, 0.0)
    assert compare_leaf(7, 7, location="o") == LeafStats("o", 0.0, 0.0)


def test_leaf_stats_are_computed_in_float64() -> None:
    eager = torch.tensor([1.0], dtype=torch.float32)
    engine = torch.tensor([1.0 + 2**-23], dtype=torch.float32)
    stats = compare_leaf(eager, engine, location="o")
    assert stats.max_abs == 2**-23
    assert stats.max_rel == 2**-23


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("atol", [1e-5, 0.0])
def test_a_passing_leaf_s_figures_are_those_of_the_full_comparison(
    dtype: torch.dtype, atol: float
) -> None:
    from pytest_aoti.compare import _passed_finite
    from pytest_aoti.tolerance import abs_diff, leaf_stats

    generator = torch.Generator().manual_seed(0)
    want = torch.randn(4, 64, 32, generator=generator).to(dtype)
    want[0, 0, :4] = 0.0  # zeros: no relative error there
    got = want.clone()
    got[1:] += (want[1:].abs() * 1e-3).to(dtype)
    rtol = 2e-3 if dtype != torch.bfloat16 else 2e-2
    fast = _passed_finite(want, got, "o", rtol, atol)
    full = leaf_stats("o", want, abs_diff(want, got), rtol, atol)
    assert fast is not None
    assert fast.max_abs == pytest.approx(full.max_abs, rel=1e-6)
    assert fast.max_rel == pytest.approx(full.max_rel, rel=1e-2)
    assert fast.tolerance_used == pytest.approx(full.tolerance_used, rel=1e-2)


@pytest.mark.parametrize(
    "change", ["beyond", "nan", "inf on both", "inf on one", "overflowing difference"]
)
def test_a_leaf_beyond_tolerance_or_not_finite_takes_the_full_comparison(change: str) -> None:
    from pytest_aoti.compare import _passed_finite

    want = torch.ones(16)
    got = want.clone()
    if change == "beyond":
        got[3] += 1e-3
    elif change == "nan":
        want[2] = got[2] = math.nan
    elif change == "inf on both":
        want[2] = got[2] = math.inf
    elif change == "inf on one":
        got[5] = math.inf
    else:
        want[0], got[0] = 3e38, -3e38
    assert _passed_finite(want, got, "o", 1.3e-6, 1e-5) is None
    assert _passed_finite(want, got, "o", 1.3e-6, 0.0) is None


# --- fp64 rescue --------------------------------------------------------------------------


def _sequential_float32_sum(values: np.ndarray) -> float:
    """Sum one element at a time in float32: a fixed, platform-independent order."""
    total = np.float32(0.0)
    for value in values:
        total = np.float32(total + value)
    return float(total)


@pytest.fixture(scope="module")
def reordered_sums() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Two float32 sums of 1496 values in opposite orders, and the float64 sum.

    They disagree by several times the float32 default tolerance, yet each is about as
    close to the float64 result as the other: a reordered reduction, not a bug.
    """
    values = torch.randn(1496, generator=torch.Generator().manual_seed(2)) * 4
    values = values - values.mean()
    forward = _sequential_float32_sum(values.numpy())
    backward = _sequential_float32_sum(values.numpy()[::-1])
    exact = values.double().sum()
    eager = torch.tensor(forward, dtype=torch.float32)
    engine = torch.tensor(backward, dtype=torch.float32)

    rtol, atol = Tolerance().resolve(torch.float32)
    assert abs(forward - backward) > 3 * (atol + rtol * abs(forward))
    eager_error, engine_error = abs(forward - float(exact)), abs(backward - float(exact))
    assert 0.5 < engine_error / eager_error < 2.0
    return eager, engine, exact


def test_reordered_sum_passes_with_the_fp64_reference(
    reordered_sums: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
) -> None:
    eager, engine, exact = reordered_sums
    reference = _CountingReference((exact,))
    [stats] = compare_trees((eager,), (engine,), what="output", reference=reference)
    assert reference.calls == 1
    assert stats.max_abs > 3e-5


def test_reordered_sum_fails_without_a_reference(
    reordered_sums: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
) -> None:
    eager, engine, _ = reordered_sums
    with pytest.raises(AotiCheckError, match=r"^output differs .*: 1 of 1 elements beyond"):
        compare_trees(eager, engine, what="output")


def test_explicit_tolerance_is_final_even_with_a_reference(
    reordered_sums: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
) -> None:
    eager, engine, exact = reordered_sums
    reference = _CountingReference(exact)
    with pytest.raises(AotiCheckError, match=r"beyond rtol=1.3e-06, atol=1e-05") as excinfo:
        compare_trees(eager, engine, what="output", tolerance=FP32_DEFAULT, reference=reference)
    assert reference.calls == 0
    assert "fp64" not in str(excinfo.value)


def test_engine_far_from_fp64_fails_despite_the_reference(
    reordered_sums: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
) -> None:
    eager, _, exact = reordered_sums
    wrong = eager + 1e-3
    with pytest.raises(AotiCheckError) as excinfo:
        compare_trees(eager, wrong, what="output", reference=lambda: exact)
    [rescue] = [line for line in _message(excinfo) if "fp64 check" in line]
    assert re.fullmatch(
        r"  fp64 check: rmse\(engine vs fp64\)=\S+ exceeds "
        r"10 \* rmse\(eager vs fp64\)=\S+ \+ 1e-05 = \S+",
        rescue,
    )


def _noisy_pair(
    numel: int, ratio: float, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """eager and engine whose RMSEs against the float64 truth stand in ``ratio``."""
    generator = torch.Generator().manual_seed(0)
    truth = torch.randn(numel, generator=generator, dtype=torch.float64)
    noise = torch.randn(numel, generator=generator, dtype=torch.float64) * 1e-2
    eager = (truth + noise).to(dtype)
    engine = (truth - ratio * noise).to(dtype)
    return eager, engine, truth


@pytest.mark.parametrize(
    ("numel", "dtype", "ratio", "passes"),
    [
        (2000, torch.float32, 1.5, True),
        (2000, torch.float32, 2.5, False),
        (2000, torch.bfloat16, 2.5, True),
        (2000, torch.bfloat16, 3.5, False),
        (800, torch.float32, 2.5, True),
        (800, torch.float32, 3.5, False),
        (300, torch.float32, 7.0, True),
        (300, torch.float32, 9.0, False),
        (8, torch.float32, 9.0, True),
        (8, torch.float32, 12.0, False),
    ],
)
def test_rescue_multiplier_follows_dynamo_same(
    numel: int, dtype: torch.dtype, ratio: float, passes: bool
) -> None:
    eager, engine, truth = _noisy_pair(numel, ratio, dtype)
    if passes:
        compare_trees(eager, engine, what="output", reference=lambda: truth)
    else:
        with pytest.raises(AotiCheckError, match="fp64 check: rmse"):
            compare_trees(eager, engine, what="output", reference=lambda: truth)


def test_reference_is_not_called_when_everything_passes() -> None:
    reference = _CountingReference((torch.ones(2, dtype=torch.float64),))
    compare_trees((torch.ones(2),), (torch.ones(2),), what="output", reference=reference)
    assert reference.calls == 0


def test_reference_is_called_once_for_several_rescued_leaves() -> None:
    eager_a, engine_a, truth_a = _noisy_pair(2000, 1.0)
    eager_b, engine_b, truth_b = _noisy_pair(3000, 1.0)
    reference = _CountingReference({"a": truth_a, "b": [truth_b, 4]})
    compare_trees(
        {"a": eager_a, "b": [eager_b, 4]},
        {"a": engine_a, "b": [engine_b, 4]},
        what="output",
        reference=reference,
    )
    assert reference.calls == 1


def test_reference_that_raises_counts_as_no_reference() -> None:
    eager, engine, _ = _noisy_pair(2000, 1.0)
    calls = []

    def broken() -> Any:
        calls.append(1)
        raise RuntimeError("float64 not supported by this op")

    with pytest.raises(AotiCheckError) as excinfo:
        compare_trees(
            {"a": eager, "b": eager}, {"a": engine, "b": engine}, what="output", reference=broken
        )
    assert _message(excinfo)[0].startswith("output['a'] differs")
    assert "fp64 check unavailable: computing it raised RuntimeError: float64 not supported" in str(
        excinfo.value
    )
    assert calls == [1]


@pytest.mark.parametrize(
    ("reference_value", "reason"),
    [
        ((torch.zeros(5, dtype=torch.float64),), "different structure"),
        (
            torch.zeros(3, dtype=torch.float64),
            r"reference leaf is torch.float64 \(3,\), not float64 \(5,\)",
        ),
        (torch.zeros(5, dtype=torch.float32), r"reference leaf is torch.float32 \(5,\)"),
    ],
)
def test_unusable_reference_is_reported(reference_value: Any, reason: str) -> None:
    eager = torch.zeros(5)
    with pytest.raises(AotiCheckError, match=rf"fp64 check unavailable: .*{reason}"):
        compare_trees(eager, eager + 1.0, what="output", reference=lambda: reference_value)


def test_compare_leaf_takes_a_leaf_reference() -> None:
    eager, engine, truth = _noisy_pair(2000, 1.0)
    reference: Callable[[], Any] = lambda: truth  # noqa: E731
    compare_leaf(eager, engine, location="output", reference=reference)
    with pytest.raises(AotiCheckError):
        compare_leaf(eager, engine, location="output")


def test_non_floating_leaves_are_never_rescued() -> None:
    with pytest.raises(AotiCheckError, match="exact comparison"):
        compare_trees(
            torch.tensor([1]),
            torch.tensor([2]),
            what="output",
            reference=lambda: torch.tensor([2.0], dtype=torch.float64),
        )


# --- assert_unchanged -----------------------------------------------------------------------


def test_assert_unchanged_passes_for_identical_bits_and_nan() -> None:
    before = torch.tensor([1.0, math.nan, -math.inf])
    assert_unchanged(before, before.clone(), location="input 'y'")
    ints = torch.arange(6).reshape(2, 3)
    assert_unchanged(ints, ints.clone(), location="input 'y'")


def test_assert_unchanged_treats_any_nan_as_equal_to_nan() -> None:
    # kernels may write back a NaN with another payload; that is not a change of value
    other_nan = torch.tensor([0x7FC00001], dtype=torch.int32).view(torch.float32)
    assert math.isnan(float(other_nan))
    assert_unchanged(torch.tensor([math.nan]), other_nan, location="input 'y'")


def test_assert_unchanged_reports_changed_elements() -> None:
    before = torch.arange(6.0).reshape(2, 3)
    after = before.clone()
    after.view(-1)[2:] += 1
    with pytest.raises(AotiCheckError) as excinfo:
        assert_unchanged(before, after, location="input 'y'", context="call 1")
    lines = _message(excinfo)
    assert lines[0] == (
        "input 'y' was modified by the AOTI engine although the program does not mutate it "
        "(call 1): 4 of 6 elements changed"
    )
    assert "  first change at index (0, 2): before=2 after=3" in lines


def test_assert_unchanged_is_bitwise() -> None:
    # equal under ==, but a different bit pattern is still a write
    with pytest.raises(AotiCheckError, match="1 of 1 elements changed"):
        assert_unchanged(torch.tensor([0.0]), torch.tensor([-0.0]), location="input 'y'")
    with pytest.raises(AotiCheckError, match="1 of 2 elements changed"):
        assert_unchanged(
            torch.tensor([True, False]), torch.tensor([True, True]), location="input 'y'"
        )


def test_assert_unchanged_reports_shape_and_dtype_changes() -> None:
    sizes = re.escape("shape changed from torch.Size([3]) to torch.Size([4])")
    with pytest.raises(AotiCheckError, match=rf"{sizes}$"):
        assert_unchanged(torch.zeros(3), torch.zeros(4), location="input 'y'")
    with pytest.raises(AotiCheckError, match=r"dtype changed from torch.float32 to torch.float16$"):
        assert_unchanged(torch.zeros(3), torch.zeros(3, dtype=torch.float16), location="input 'y'")


# --- assert_values ------------------------------------------------------------------------


def test_assert_values_accepts_a_nested_list() -> None:
    actual = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    stats = assert_values([[1, 2], [3, 4]], actual, location="input 'x'")
    assert stats == LeafStats("input 'x'", 0.0, 0.0)
    with pytest.raises(AotiCheckError) as excinfo:
        assert_values([[1, 2], [3, 5]], actual, location="input 'x'", context="call 3")
    lines = _message(excinfo)
    assert lines[0] == (
        "input 'x' holds the wrong value after the AOTI engine ran (call 3): "
        "1 of 4 elements beyond rtol=1.3e-06, atol=1e-05"
    )
    assert "  worst at index (1, 1): expected=5 engine=4" in lines


def test_assert_values_does_not_broadcast() -> None:
    expected_line = re.escape(
        "input 'x' holds the wrong value after the AOTI engine ran: "
        "shape differs: expected torch.Size([]), engine torch.Size([3])"
    )
    with pytest.raises(AotiCheckError, match=rf"^{expected_line}$"):
        assert_values(1.0, torch.ones(3), location="input 'x'")


def test_assert_values_honours_explicit_tolerance() -> None:
    actual = torch.tensor([1.0, 2.001])
    assert_values([1.0, 2.0], actual, location="input 'x'", tolerance=Tolerance(atol=1e-2))
    with pytest.raises(AotiCheckError, match="holds the wrong value"):
        assert_values([1.0, 2.0], actual, location="input 'x'")


def test_assert_values_with_integer_tensor() -> None:
    actual = torch.tensor([3, 4], dtype=torch.int64)
    assert_values(torch.tensor([3, 4], dtype=torch.int32), actual, location="input 'n'")
    with pytest.raises(AotiCheckError, match=r"exact comparison for torch.int64"):
        assert_values([3, 5], actual, location="input 'n'")
    # 4.5 would round to 4 and pass silently
    with pytest.raises(AotiCheckError, match=r"does not fit the engine's dtype torch.int64"):
        assert_values([3, 4.5], actual, location="input 'n'")


def test_assert_values_needs_a_tensor_from_the_engine() -> None:
    with pytest.raises(AotiCheckError, match="engine left int, not a tensor"):
        assert_values(1, 1, location="input 'x'")  # type: ignore[arg-type]


def test_python_number_output_matches_engine_zero_dim_tensor():
    # AOTI engines return every output as a tensor: eager's int 3 comes back as tensor(3)
    compare_trees((1, 3), (1, torch.tensor(3)), what="output")
    compare_trees(2.5, torch.tensor(2.5), what="output")
    with pytest.raises(AotiCheckError, match=r"output\[1\] differs .*: eager 3, engine 4"):
        compare_trees((1, 3), (1, torch.tensor(4)), what="output")
    with pytest.raises(AotiCheckError, match="type differs"):
        compare_trees(3, torch.tensor([3]), what="output")
    with pytest.raises(AotiCheckError, match="type differs"):
        compare_trees(3, torch.tensor(3.0), what="output")


def test_same_answers_are_one_structure_of_equal_values_nan_where_nan() -> None:
    nan = float("nan")
    answer = (torch.tensor([1.0, nan, float("inf")]), {"count": 3, "mask": torch.tensor([True])})
    again = (torch.tensor([1.0, nan, float("inf")]), {"count": 3, "mask": torch.tensor([True])})
    assert same_answers(answer, again)
    assert same_answers(torch.tensor([-0.0]), torch.tensor([0.0])), "equal values"
    assert not same_answers(torch.tensor([float("inf")]), torch.tensor([torch.finfo().max]))
    assert not same_answers(torch.tensor([nan]), torch.tensor([0.0]))
    assert not same_answers(torch.ones(1), torch.ones(3)), "no broadcasting"
    assert not same_answers(torch.ones(2), torch.ones(2, dtype=torch.float64))
    assert not same_answers((torch.ones(2),), (torch.ones(2), torch.ones(2)))
    assert not same_answers({"count": 3}, {"count": 4})
