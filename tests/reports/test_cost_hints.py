"""A test that compiles more than three programs of one module class gets one summary line
saying why each compiled (other weights: seed once; other shapes: ``dynamic_shapes``) and
what it cost."""

from __future__ import annotations

import pytest

from pytest_aoti.reports.cost_hints import CompiledHere, cost_hints


def _program(module: str, graph: str, weights: str, seconds: float = 2.0) -> CompiledHere:
    parts = {"graph": graph, "weights": weights, "configs": "c", "device": "cpu", "torch": "t"}
    return CompiledHere(module, parts, seconds)


def test_many_seeds_and_many_shapes_each_say_why() -> None:
    seeds = [_program("Net", "g", f"w{seed}") for seed in range(5)]
    shapes = [_program("Conv", f"g{size}", "w") for size in range(4)]
    few = [_program("Small", "g", f"w{seed}") for seed in range(3)]
    lines = cost_hints("t.py::test_x", [*seeds, *shapes, *few])
    assert lines == [
        "t.py::test_x compiled 5 programs of Net in 10.0 s; 5 differ only in their weights: "
        "seed the model once (torch.manual_seed) and they share one program",
        "t.py::test_x compiled 4 programs of Conv in 8.0 s; 4 graphs (other shapes or other "
        "code): one program with dynamic_shapes= checks every shape",
    ]


SEEDS = """
@pytest.mark.parametrize("unused", [0])
def test_seeds(aoti, unused):
    for seed in range(4):
        torch.manual_seed(seed)
        aoti.check(torch.nn.Linear(3, 2), (torch.ones(1, 3),), probes="off", examples=0)
"""


@pytest.mark.compiles
def test_a_test_that_compiles_four_seeds_gets_the_hint(run_aoti, tmp_path) -> None:
    result = run_aoti(SEEDS, f"--aoti-cache-dir={tmp_path / 'cold'}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*aoti: notes (not failures)*",
            "test_inner.py::test_seeds[[]cpu-0[]] compiled 4 programs of Linear in * s; 4 differ "
            "only in their weights: seed the model once (torch.manual_seed) and they share one "
            "program",
        ]
    )
    warm = run_aoti(SEEDS, f"--aoti-cache-dir={tmp_path / 'cold'}")
    warm.assert_outcomes(passed=1)
    assert "compiled 4 programs" not in warm.stdout.str(), "loaded programs cost nothing"
