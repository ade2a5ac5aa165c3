"""Hypothesis strategies for shapes and inputs an exported program accepts."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from hypothesis import find, given, settings
from hypothesis import strategies as st
from torch.export import Dim, ExportedProgram

from pytest_aoti.errors import AotiUsageError
from pytest_aoti.mutation_maps import named_user_inputs
from pytest_aoti.shapes.read import read_program_shapes
from pytest_aoti.shapes.validate import solve_sizes, validate_inputs
from pytest_aoti.strategies import inputs_for, shapes_for

FEW = settings(
    max_examples=25,
    deadline=None,
    database=None,
)


class Model(torch.nn.Module):
    def forward(
        self, x: torch.Tensor, pair: list[torch.Tensor], n: int, *, mask: torch.Tensor
    ) -> torch.Tensor:
        y, index = pair
        return x.sum() + y.sum() + index.sum() * n + mask.sum()


# ``x`` has values in [10, 20]; ``y`` is all zeros, so its values have no range to copy.
LIKE = (
    torch.linspace(10, 20, 18).reshape(6, 3),
    [torch.zeros(3, 3, dtype=torch.float64), torch.tensor([3, 7, 5, 4])],
    2,
)
LIKE_KWARGS = {"mask": torch.tensor([True, False, True])}


@pytest.fixture(scope="module")
def program() -> ExportedProgram:
    d = Dim("d", min=2, max=20)
    k = Dim("k", min=3)
    return torch.export.export(
        Model(),
        LIKE,
        LIKE_KWARGS,
        dynamic_shapes={
            "x": {0: 2 * d, 1: Dim.STATIC},
            "pair": [{0: d, 1: Dim.STATIC}, {0: k}],
            "n": None,
            "mask": {0: d},
        },
    )


@pytest.fixture(scope="module")
def shapes_strategy(program: ExportedProgram) -> Any:
    return shapes_for(program)


@pytest.fixture(scope="module")
def inputs_strategy(program: ExportedProgram) -> Any:
    # The plugin's AotiProgram holds the program as ``.exported``.
    return inputs_for(SimpleNamespace(exported=program), like=LIKE, like_kwargs=LIKE_KWARGS)


@FEW
@given(data=st.data())
def test_shapes_lie_within_the_exported_ranges(
    program: ExportedProgram, shapes_strategy: Any, data: st.DataObject
) -> None:
    shapes = read_program_shapes(program)
    drawn = data.draw(shapes_strategy)
    assert set(drawn) == {"x", "pair_0", "pair_1", "mask"}
    solve_sizes(shapes, drawn)  # raises on any size outside its range or relation
    assert drawn["x"][0] == 2 * drawn["pair_0"][0] == 2 * drawn["mask"][0]
    assert drawn["x"][1] == 3 and drawn["pair_0"][1] == 3
    assert 2 <= drawn["pair_0"][0] <= 20
    assert 3 <= drawn["pair_1"][0] <= 64  # unbounded, capped at max_dim


@FEW
@given(data=st.data())
def test_inputs_follow_the_example(
    program: ExportedProgram, inputs_strategy: Any, data: st.DataObject
) -> None:
    args, kwargs = data.draw(inputs_strategy)
    validate_inputs(read_program_shapes(program), named_user_inputs(program, args, kwargs))
    x, pair, n = args
    y, index = pair
    assert isinstance(pair, list) and n is LIKE[2] and set(kwargs) == {"mask"}
    assert (x.dtype, y.dtype, index.dtype, kwargs["mask"].dtype) == (
        torch.float32,
        torch.float64,
        torch.int64,
        torch.bool,
    )
    assert {t.device for t in (x, y, index, kwargs["mask"])} == {torch.device("cpu")}
    assert 10 <= x.min() and x.max() <= 20 and x.unique().numel() > 1
    assert -1 <= y.min() and y.max() <= 1 and y.unique().numel() > 1
    assert 3 <= index.min() and index.max() <= 7


def test_max_dim_caps_every_symbol(program: ExportedProgram) -> None:
    @settings(max_examples=25, deadline=None, database=None)
    @given(shapes_for(program, max_dim=8))
    def check(drawn: dict[str, tuple[int, ...]]) -> None:
        assert drawn["pair_0"][0] <= 8 and drawn["pair_1"][0] <= 8

    check()


def test_shrinks_to_the_smallest_failing_shape(shapes_strategy: Any) -> None:
    found = find(shapes_strategy, lambda s: s["x"][0] >= 10, settings=settings(database=None))
    assert found == {"x": (10, 3), "pair_0": (5, 3), "pair_1": (3,), "mask": (5,)}


def test_shrinks_to_the_minimum_when_failing_everywhere(inputs_strategy: Any) -> None:
    args, kwargs = find(inputs_strategy, lambda inputs: True, settings=settings(database=None))
    assert args[0].shape == (4, 3)
    assert args[1][0].shape == (2, 3) and args[1][1].shape == (3,)
    assert kwargs["mask"].shape == (2,)


def test_degenerate_example_range_falls_back_to_minus_one_one(inputs_strategy: Any) -> None:
    def spread(inputs: tuple[tuple[Any, ...], dict[str, Any]]) -> bool:
        y = inputs[0][1][0]
        return bool(y.min() < -0.5 and y.max() > 0.5)

    find(inputs_strategy, spread, settings=settings(database=None))


def test_same_draw_same_values(inputs_strategy: Any) -> None:
    first = find(inputs_strategy, lambda inputs: True, settings=settings(database=None))
    second = find(inputs_strategy, lambda inputs: True, settings=settings(database=None))
    assert torch.equal(first[0][0], second[0][0])


def test_rejects_what_is_not_a_program() -> None:
    with pytest.raises(AotiUsageError, match="expected an ExportedProgram"):
        shapes_for(object())


def test_example_must_match_the_program(program: ExportedProgram) -> None:
    with pytest.raises(AotiUsageError, match="keyword mask missing"):
        inputs_for(program, like=LIKE)


def test_generated_tensors_keep_the_example_layout() -> None:
    class Scale(torch.nn.Module):
        def forward(self, images: torch.Tensor) -> torch.Tensor:
            return images * 2

    example = torch.randn(2, 3, 4, 4).contiguous(memory_format=torch.channels_last)
    exported = torch.export.export(Scale(), (example,), dynamic_shapes=({0: Dim("b", max=8)},))
    shapes = read_program_shapes(exported)
    inputs = find(inputs_for(exported, like=(example,)), lambda drawn: drawn[0][0].shape[0] > 2)
    (images,), _ = inputs
    assert images.is_contiguous(memory_format=torch.channels_last)
    validate_inputs(shapes, named_user_inputs(exported, (images,), {}))


def test_example_that_does_not_fit_the_program_is_a_usage_error(program: ExportedProgram) -> None:
    with pytest.raises(AotiUsageError, match="the example does not fit the program"):
        inputs_for(program, like=(torch.randn(4, 3),))
