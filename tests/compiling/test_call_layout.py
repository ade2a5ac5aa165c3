"""How a program is called (its input spec, keyword order and input names) is read once per
exported program: ``ExportedProgram.call_spec`` is rebuilt on every access, and a search
names and flattens every input set it builds."""

from __future__ import annotations

import gc
from typing import Any

import pytest
import torch
from torch.export import ExportedProgram

from pytest_aoti import mutation_maps
from pytest_aoti.mutation_maps import flat_user_inputs, named_user_inputs, ordered_kwargs


class _Keywords(torch.nn.Module):
    def forward(self, x: torch.Tensor, *, scale: torch.Tensor, shift: torch.Tensor) -> Any:
        return x * scale + shift


def _export() -> ExportedProgram:
    x, scale, shift = torch.ones(3), torch.full((3,), 2.0), torch.full((3,), 0.5)
    return torch.export.export(_Keywords(), (x,), {"scale": scale, "shift": shift})


@pytest.fixture(scope="module")
def program() -> ExportedProgram:
    return _export()


def test_keywords_flatten_in_the_forwards_order_whatever_order_they_come_in(
    program: ExportedProgram,
) -> None:
    x, scale, shift = torch.ones(3), torch.full((3,), 2.0), torch.full((3,), 0.5)
    given = {"shift": shift, "scale": scale}
    assert list(ordered_kwargs(program, given)) == ["scale", "shift"]
    assert flat_user_inputs(program, (x,), given) == [x, scale, shift]
    named = named_user_inputs(program, (x,), given)
    assert list(named) == ["x", "scale", "shift"]
    assert named["shift"] is shift


def test_the_call_spec_is_read_once_per_program(monkeypatch: pytest.MonkeyPatch) -> None:
    program = _export()  # a program of its own: none of its layout is read yet
    reads: list[int] = []
    spec = ExportedProgram.call_spec

    def counted(self: ExportedProgram) -> Any:
        reads.append(id(self))
        return spec.fget(self)  # type: ignore[attr-defined]

    monkeypatch.setattr(ExportedProgram, "call_spec", property(counted))
    x, kwargs = torch.ones(3), {"scale": torch.ones(3), "shift": torch.zeros(3)}
    for _ in range(5):
        named_user_inputs(program, (x,), kwargs)
        flat_user_inputs(program, (x,), kwargs)
        ordered_kwargs(program, kwargs)
    assert reads == [id(program)]


def test_a_program_read_once_is_not_kept_alive() -> None:
    program = _export()
    named_user_inputs(program, (torch.ones(3),), {"scale": torch.ones(3), "shift": torch.ones(3)})
    assert program in mutation_maps._LAYOUTS
    held = len(mutation_maps._LAYOUTS)
    del program
    gc.collect()
    assert len(mutation_maps._LAYOUTS) == held - 1
