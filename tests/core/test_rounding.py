"""Numbers compared as numbers, and no false alarm by rounding (pure logic: export only).

A Python float output is compared with the tolerance of the dtype it was read from; an int
exactly. The fp64 rule allows a result the rounding of the terms it accumulates (a long
float32 sum added up in another order), and nothing to a result that accumulates nothing."""

from __future__ import annotations

import torch
from torch.export import Dim

from pytest_aoti.compare import compare_trees
from pytest_aoti.compiling.accumulation import accumulation
from pytest_aoti.compiling.graph_ops import scalar_output_dtypes
from pytest_aoti.errors import AotiCheckError
from pytest_aoti.tolerance import accumulated_rounding, fp64_rescue


class Mixed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(64, 32)
        self.register_buffer("seen", torch.zeros(32))

    def forward(self, x: torch.Tensor, cache: torch.Tensor) -> tuple[object, ...]:
        scores = self.linear(x).softmax(-1)
        cache.add_(scores.sum(0))
        self.seen.add_(scores[0])
        return scores.sum(0), x * 2, x.sum().item(), x.half().sum().item(), x.shape[0] / 2


def test_each_result_accumulates_the_terms_on_its_longest_chain() -> None:
    exported = torch.export.export(
        Mixed(), (torch.randn(4, 64), torch.zeros(32)), dynamic_shapes=({0: Dim("b")}, None)
    )
    found = accumulation(exported)
    # linear (64) + softmax (32) + a sum over the batch (4, the example's size)
    assert found.outputs[:2] == (100, 0)
    assert found.inputs == {"cache": 100} and found.buffers == {"seen": 96}
    assert found == accumulation(exported.run_decompositions())
    # reading the sizes guards nothing: the batch is still a symbol
    x = next(node for node in exported.graph.nodes if node.name == "x")
    assert not isinstance(x.meta["val"].shape[0], int)


def test_a_python_float_is_compared_with_the_tolerance_of_its_dtype() -> None:
    exported = torch.export.export(
        Mixed(), (torch.randn(4, 64), torch.zeros(32)), dynamic_shapes=({0: Dim("b")}, None)
    )
    dtypes = scalar_output_dtypes(exported)
    assert dtypes == [None, None, torch.float32, torch.float16, None]
    eager, engine = [7.746570110321045], [7.746574]  # a few float32 ulps apart
    compare_trees(eager, engine, what="output", scalar_dtypes=[torch.float32])
    try:
        compare_trees(eager, engine, what="output")  # float64's tolerance: they differ
    except AotiCheckError as error:
        assert "a Python float read from torch.float64" in str(error)
    else:
        raise AssertionError("a float64 comparison took an ulp of float32")
    try:
        compare_trees([3], [4], what="output", scalar_dtypes=[torch.float32])
    except AotiCheckError as error:
        assert "eager 3, engine 4" in str(error)  # an int: exact
    else:
        raise AssertionError("ints must be equal")


def test_a_long_sum_in_another_order_passes_and_an_elementwise_bug_does_not() -> None:
    torch.manual_seed(0)
    values = torch.randn(5, 1496, 8) * 3
    eager, reference = values.sum(1), values.double().sum(1)
    # an engine that adds the terms in another order: twelve times further from float64
    # than eager (the measured 1,496-long sum of an AOTI engine was nine times further)
    engine = (reference + 12 * (eager.double() - reference)).float()
    assert not fp64_rescue(eager, engine, lambda: reference, accumulates=0).passed
    rescue = fp64_rescue(eager, engine, lambda: reference, accumulates=1496)
    assert rescue.passed and not rescue.engine_closer
    wrong = eager.clone()
    wrong[2, 3] += 1.0  # a whole unit: no rounding of 1,496 terms does that
    assert not fp64_rescue(eager, wrong, lambda: reference, accumulates=1496).passed
    assert accumulated_rounding(torch.float32, 1, reference) == 0.0
