"""Draws on every input form, and the draws where two inputs meet (pure logic: no compile).

Every drawn input has the example's sizes, strides and storage offset; an expanded input's
elements stay expanded; a one-element float is drawn near its value with its sign; a
position keeps its value. Meeting draws put every pair of special-point classes of two
inputs that meet element by element at one position, small inputs getting more draws."""

from __future__ import annotations

from itertools import product

import pytest
import torch

from pytest_aoti.trees import clone_like, distinct_shape, laid_out_like
from pytest_aoti.values.classes import PointClass, point_classes
from pytest_aoti.values.draws import DrawPlan, draw_seed
from pytest_aoti.values.failing_elements import constant_positions
from pytest_aoti.values.meetings import MEETING_CAP, MeetingInput, plan_meetings

LAYOUTS = {
    "sliced with gaps": torch.randn(3, 8)[:, ::2],
    "expanded": torch.randn(1, 4).expand(3, 4),
    "storage offset": torch.randn(20)[3:15].view(3, 4),
    "permuted": torch.randn(4, 3).t(),
    "channels_last": torch.randn(2, 3, 4, 4).contiguous(memory_format=torch.channels_last),
    "0-dim": torch.tensor(0.7),
    "empty": torch.randn(0, 3),
}


@pytest.mark.parametrize("name", LAYOUTS)
def test_a_copy_keeps_sizes_strides_offset_and_owns_its_storage(name: str) -> None:
    example = LAYOUTS[name]
    copy = clone_like(example)
    assert (copy.shape, copy.stride(), copy.storage_offset()) == (
        example.shape,
        example.stride(),
        example.storage_offset(),
    )
    assert torch.equal(copy, example) and copy._base is None  # not a view: export reads bases
    if example.numel():
        assert copy.untyped_storage().data_ptr() != example.untyped_storage().data_ptr()


@pytest.mark.parametrize("name", LAYOUTS)
def test_every_draw_is_laid_out_like_the_example(name: str) -> None:
    example = LAYOUTS[name]
    plan = DrawPlan({"x": example}, draws=16, no_repeats=False)
    for index in range(plan.count):
        drawn = plan.draw(index, draw_seed("t", "k", index)).values["x"]
        assert (drawn.shape, drawn.stride(), drawn.storage_offset()) == (
            example.shape,
            example.stride(),
            example.storage_offset(),
        )
        if name == "expanded":  # one row of values, read three times
            assert torch.equal(drawn[0], drawn[2])


def test_overlapping_elements_keep_the_example_values() -> None:
    windows = torch.randn(10).unfold(0, 4, 1)  # windows that share elements
    plan = DrawPlan({"x": windows, "y": torch.randn(7, 4)}, draws=4, no_repeats=False)
    draw = plan.draw(0, 1)
    assert draw.values["x"] is windows and "x" not in draw.masks
    assert laid_out_like(torch.zeros(distinct_shape(windows)), windows) is None


def test_one_element_inputs_are_drawn_with_both_zeros_and_positions_keep_theirs() -> None:
    named = {
        "temperature": torch.tensor(0.7),
        "shift": torch.tensor([-2.0]),
        "steps": torch.tensor(5),
        "zero": torch.tensor(0.0),
        "position": torch.tensor(3),
    }
    plan = DrawPlan(named, draws=16, no_repeats=False, keep={"position"})
    assert plan.count >= 16 and set(plan.drawn) == {"temperature", "shift", "steps", "zero"}
    seen: dict[str, set[float]] = {name: set() for name in plan.drawn}
    signs: set[str] = set()
    for index in range(plan.count):
        values = plan.draw(index, draw_seed("t", "k", index)).values
        assert -1.41 <= float(values["temperature"]) <= 1.41
        assert -4.0 <= float(values["shift"]) <= 4.0
        assert 0 <= int(values["steps"]) <= 10
        assert -2.0 <= float(values["zero"]) <= 2.0
        assert values["position"] is named["position"]
        for name in seen:
            seen[name].add(float(values[name]))
        if float(values["temperature"]) == 0:
            signs.add(str(float(values["temperature"]))[0])
    assert signs == {"-", "0"}  # both zeros are drawn for a one-element input
    assert all(len(found) >= 3 for found in seen.values())


def test_a_zero_meets_the_other_zero_at_the_tail_and_the_last_element() -> None:
    """Two 17-element float32 inputs: a 16-wide body and one scalar tail element, which
    is also the last; every ordered pair of the zeros meets there."""
    example = {"x": torch.randn(17), "y": torch.randn(17)}
    plan = DrawPlan(example, draws=16, no_repeats=False, width=lambda dtype, inner: 16)
    met: set[tuple[str, str]] = set()
    for index in range(len(plan.meetings)):
        values = plan.draw(index, index).values
        x, y = float(values["x"][16]), float(values["y"][16])
        if x == 0 and y == 0:
            met.add((str(x), str(y)))
    assert met == {("-0.0", "0.0"), ("0.0", "-0.0"), ("-0.0", "-0.0"), ("0.0", "0.0")}
    parts = plan.meeting_plan.parts
    assert set(parts) == {"first", "body", "tail", "last"}
    assert parts["body"][0] == parts["body"][1]  # the body holds every pair
    assert len(plan.meetings) <= 16


def test_a_plain_draw_that_holds_a_constant_names_where() -> None:
    classes = {"x": (PointClass("constants", (1.703125, -1.703125), (1.7, 1.7)),)}
    x = torch.zeros(3, 4, dtype=torch.bfloat16)
    x[1, 2], x[2, 0] = 1.7, -1.7  # rounded to the class's points
    found = constant_positions({"x": x, "n": 3}, classes, limit=4)
    assert found == ([("x", [1, 2]), ("x", [2, 0])], 2)
    assert constant_positions({"x": x}, classes, limit=1) == ([("x", [1, 2])], 2)
    assert constant_positions({"x": torch.zeros(3, 4)}, classes, limit=4) == ([], 0)


def test_a_program_constant_is_a_class_rounded_to_the_inputs_dtype() -> None:
    # the example's ends are points of their own: a range that holds neither the constant
    # nor its negative keeps both in the constants' class (and drawn outside the range)
    example = {"x": torch.linspace(-1.0, 1.0, 32, dtype=torch.bfloat16).view(4, 8)}
    plan = DrawPlan(example, draws=16, no_repeats=False, constants=(1.7,))
    constants = next(c for c in plan.drawn["x"].classes if c.name == "constants")
    assert 1.703125 in constants.points and -1.703125 in constants.points
    assert constants.describe(1.703125) == "graph constant 1.7"
    drawn = {float(v) for i in range(plan.count) for v in plan.draw(i, i).values["x"].view(-1)}
    assert {1.703125, -1.703125, 3.40625} <= drawn


@pytest.mark.parametrize(
    "shapes",
    [
        [(16,), (16,)],
        [(), ()],
        [(3,), ()],
        [(4, 1), (1, 8)],
        [(16,), (16,), (16,)],
        [(2, 1, 5), (3, 1)],
    ],
    ids=str,
)
def test_every_pair_of_classes_meets_at_one_position(shapes: list[tuple[int, ...]]) -> None:
    example = {f"x{i}": torch.randn(shape) * 3 for i, shape in enumerate(shapes)}
    plan = DrawPlan(example, draws=0 + 1, no_repeats=False)
    classes = {name: drawn.classes for name, drawn in plan.drawn.items()}
    met: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for index in range(len(plan.meetings)):
        values = plan.draw(index, index).values
        for a, b in product(example, example):
            if a >= b:
                continue
            pair_a, pair_b = torch.broadcast_tensors(values[a], values[b])
            met.setdefault((a, b), set()).update(
                zip(_classes_of(pair_a, classes[a]), _classes_of(pair_b, classes[b]))
            )
    for (a, b), found in met.items():
        wanted = {(p.name, q.name) for p in classes[a] for q in classes[b]}
        assert wanted <= found, (a, b, sorted(wanted - found))
    assert len(plan.meetings) <= MEETING_CAP


def _classes_of(values: torch.Tensor, classes: tuple) -> list[str]:
    """The class each element of ``values`` belongs to (by its exact value and sign)."""
    names = []
    for value in values.reshape(-1).tolist():
        names.append(
            next(
                c.name
                for c in classes
                for point in c.points
                if _as(point, values) == value and str(_as(point, values))[0] == str(value)[0]
            )
        )
    return names


def _as(point: float, values: torch.Tensor) -> float:
    """``point`` as ``values``' dtype holds it."""
    return float(torch.tensor(point, dtype=torch.float64).to(values.dtype))


def test_small_inputs_get_more_draws_and_the_plan_depends_on_sizes_alone() -> None:
    def count(*shapes: tuple[int, ...]) -> int:
        inputs = [MeetingInput(f"x{i}", s, s, 7) for i, s in enumerate(shapes)]
        return len(plan_meetings(inputs))

    assert count((), ()) == 49 > count((3,), ()) > count((16,), (16,)) == 7
    inputs = [MeetingInput("a", (5,), (5,), 7), MeetingInput("b", (5,), (5,), 4)]
    assert plan_meetings(inputs) == plan_meetings(inputs)


def test_classes_hold_only_points_inside_the_range_and_both_zeros() -> None:
    names = [c.name for c in point_classes(-2.2, 2.3, torch.float32)]
    assert names == ["decimals", "thirds", "halves", "integers", "-0.0", "+0.0", "ends"]
    assert [c.name for c in point_classes(0.35, 1.4, torch.float32)] == [
        "decimals",
        "thirds",
        "halves",
        "integers",
        "ends",
    ]
    assert [c.points for c in point_classes(0, 5, torch.int64)] == [(0.0,), (1.0,), (5.0,)]
    assert point_classes(-1, 1, torch.complex64) == ()
