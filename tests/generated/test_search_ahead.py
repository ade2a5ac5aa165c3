"""The generated-shapes search draws its shapes first and runs them in batches; only a failure
makes it run the same search shape by shape, where Hypothesis shrinks it. No compile."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.export import Dim, export

from pytest_aoti.generated import search as generated
from pytest_aoti.shapes.read import read_program_shapes


class Double(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


@pytest.fixture(scope="module")
def shapes() -> Any:
    program = export(
        Double(), (torch.randn(4, 3),), dynamic_shapes=({0: Dim("batch", min=2, max=48)},)
    )
    return read_program_shapes(program)


class Checker:
    """Stands for the shape checker: what ran ahead, what ran one by one."""

    program = SimpleNamespace(key="program-key")

    def __init__(self, batch_passes: bool, fails: Any = None) -> None:
        self.batch_passes = batch_passes
        self.fails = fails or (lambda size: False)
        self.ahead: list[tuple[dict[str, int], int]] = []
        self.one_by_one: list[dict[str, int]] = []

    def run_ahead(self, drawn: list[tuple[dict[str, int], int]]) -> bool:
        self.ahead += drawn
        return self.batch_passes

    def run(self, values: dict[str, int], seed: int) -> None:
        self.one_by_one.append(dict(values))
        (size,) = values.values()
        if self.fails(size):
            raise generated.ShapeFailure(dict(values), seed, AssertionError(f"wrong at {size}"))


def search(shapes: Any, checker: Checker, examples: int = 12) -> Any:
    # no example database (Generation's default); the active profile's seed rules apply
    generation = generated.Generation(examples=examples, max_dim=48, label="test_id")
    return generated.search_shapes(checker, generation, shapes)  # type: ignore[arg-type]


def test_a_passing_search_runs_every_shape_ahead_and_none_alone(shapes: Any) -> None:
    checker = Checker(batch_passes=True)
    assert search(shapes, checker) is None
    assert len(checker.ahead) == 12
    assert len({tuple(values.values()) + (seed,) for values, seed in checker.ahead}) == 12
    assert checker.one_by_one == []


def test_a_failing_batch_runs_the_same_search_alone_and_shrinks(shapes: Any) -> None:
    checker = Checker(batch_passes=False, fails=lambda size: size % 2 == 1)
    failure = search(shapes, checker, examples=30)
    assert failure is not None
    assert list(failure.values.values()) == [3]  # the smallest odd batch in [2, 48]
    assert failure.rerun.startswith("replay: ")
    # the same seed: shape by shape, the search draws what it drew ahead, up to the failure
    drawn = [values for values, _ in checker.ahead]
    first_odd = next(i for i, values in enumerate(drawn) if list(values.values())[0] % 2)
    assert checker.one_by_one[: first_odd + 1] == drawn[: first_odd + 1]


def test_a_batch_failure_the_search_does_not_find_again_is_still_reported(shapes: Any) -> None:
    calls: list[int] = []

    def flaky(size: int) -> bool:
        # passes while Hypothesis runs it; fails when run alone afterwards
        calls.append(size)
        return len(calls) > 30

    checker = Checker(batch_passes=False, fails=flaky)
    failure = search(shapes, checker, examples=30)
    assert failure is not None
    assert "failed in a batch only" in failure.rerun
