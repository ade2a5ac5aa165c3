"""Which probe variants the exported program is run on to learn whether it accepts them:
only those its input checks could refuse (no compile: an exported program is enough)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from pytest_aoti.probes.feature import ProbeVariant
from pytest_aoti.probes.guards import Judged, guard
from pytest_aoti.probes.variants import Variant


class Scale(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class TakesPositiveRows(torch.nn.Module):
    """A runtime assertion on a value: the count of positive elements is at least one."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        count = (x > 0).sum().item()
        torch._check(count >= 1)
        return x * count


def program_of(module: torch.nn.Module, example: torch.Tensor, built: list[int]) -> Any:
    """What the guard reads of a program, its exported program counting ``module()`` calls."""
    exported = torch.export.export(module, (example,))
    module_of = exported.module

    def counted() -> torch.nn.Module:
        built.append(1)
        return module_of()

    exported.module = counted  # type: ignore[method-assign]
    return SimpleNamespace(exported=exported, mutated_buffers=set())


def judged(kind: ProbeVariant, x: torch.Tensor) -> Judged:
    return Judged(Variant("x", str(kind), kind, (x,), {}), accepted=True)


def test_layout_and_edge_value_variants_of_a_program_without_assertions_are_not_run() -> None:
    example = torch.randn(4, 8)
    built: list[int] = []
    program = program_of(Scale(), example, built)
    variants = [
        judged(ProbeVariant.PERMUTED, example.t().contiguous().t()),
        judged(ProbeVariant.STORAGE_OFFSET, torch.randn(40)[8:].view(4, 8)),
        judged(ProbeVariant.VALUES, torch.full((4, 8), float("nan"))),
    ]
    guard(program, variants, ((example,), {}))
    assert built == [], "the exported program was built for variants it cannot refuse"
    assert all(item.accepted for item in variants)


def test_another_size_along_a_static_dim_is_refused_without_running_the_program() -> None:
    example = torch.randn(4, 8)
    built: list[int] = []
    program = program_of(Scale(), example, built)
    same = judged(ProbeVariant.PERMUTED, example.t().contiguous().t())
    other_size = judged(ProbeVariant.SIZE, torch.randn(3, 8))
    guard(program, [same, other_size], ((example,), {}))
    assert built == []
    assert same.accepted and not other_size.accepted
    with pytest.raises(Exception, match="4"):  # what running it says
        torch.export.export(Scale(), (example,)).module()(torch.randn(3, 8))


@pytest.mark.parametrize(("rows", "accepted"), [(3, True), (9, False)])
def test_another_size_along_a_dynamic_dim_runs_the_program(rows: int, accepted: bool) -> None:
    example = torch.randn(4, 8)
    built: list[int] = []
    rows_dim = torch.export.Dim("rows", min=2, max=8)
    exported = torch.export.export(Scale(), (example,), dynamic_shapes=({0: rows_dim},))
    module_of = exported.module

    def counted() -> torch.nn.Module:
        built.append(1)
        return module_of()

    exported.module = counted  # type: ignore[method-assign]
    program = SimpleNamespace(exported=exported, mutated_buffers=set())
    variant = judged(ProbeVariant.SIZE, torch.randn(rows, 8))
    guard(program, [variant], ((example,), {}))
    assert built == [1]
    assert variant.accepted is accepted


@pytest.mark.parametrize("value", [1.0, -1.0])
def test_a_program_that_asserts_values_runs_every_variant(value: float) -> None:
    example = torch.ones(4, 8)
    built: list[int] = []
    program = program_of(TakesPositiveRows(), example, built)
    variant = judged(ProbeVariant.VALUES, torch.full((4, 8), value))
    guard(program, [variant], ((example,), {}))
    assert built == [1]
    assert variant.accepted is (value > 0)
