"""The caller's module never changes (pure logic: export only): eager runs a copy that
shares the weights, a Parameter the program writes is found before any eager call, and a
Python attribute a call changes is named."""

from __future__ import annotations

import pytest
import torch

from pytest_aoti.checks.module_guard import (
    assert_weights_unwritten,
    changes_between,
    describe_changes,
    eager_copy,
    parameter_writes,
    plain_attributes,
    weight_versions,
)
from pytest_aoti.errors import AotiUsageError


class Writes(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(4))
        self.v = torch.nn.Parameter(torch.ones(4))
        self.register_buffer("steps", torch.zeros(1))
        self.calls = 0
        self.block = torch.nn.Module()
        self.block.seen = ()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        self.block.seen = (*self.block.seen, 1)
        self.steps.add_(1)
        with torch.no_grad():
            self.w.add_(1)
        return x * self.w + self.v


@pytest.mark.filterwarnings("ignore:While compiling, we found certain side effects")
@pytest.mark.parametrize("strict", [False, True])
def test_parameter_writes_are_found_in_the_exported_program(strict: bool) -> None:
    exported = torch.export.export(Writes(), (torch.randn(4),), strict=strict)
    assert parameter_writes(exported) == ["w"]
    linear = torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))
    assert parameter_writes(linear) == []


def test_the_copy_shares_the_weights_and_owns_buffers_and_attributes() -> None:
    module = Writes()
    copy = eager_copy(module)
    assert copy.w is module.w and copy.v is module.v
    assert copy.steps is not module.steps and copy.block is not module.block
    before = plain_attributes(copy)
    versions = weight_versions(copy)
    copy(torch.randn(4))
    changes = changes_between(before, plain_attributes(copy))
    assert [change.path for change in changes] == ["self.calls", "self.block.seen"]
    assert describe_changes(changes).startswith(
        "forward changes self.calls, self.block.seen, Python attributes: torch.export froze "
        "their values at export"
    )
    with pytest.raises(AotiUsageError, match="forward writes Parameter 'w' in place"):
        assert_weights_unwritten(copy, versions)
    assert module.calls == 0 and module.block.seen == () and float(module.steps) == 0.0


class Stateful(torch.nn.Module):
    """Changes what a copy holds in every way a forward can: a buffer in place, a buffer
    rebound, an attribute, a list, a new attribute, a registered hook."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self.register_buffer("steps", torch.zeros(1))
        self.register_buffer("scale", torch.ones(2))
        self.calls = 0
        self.seen: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.steps.add_(1)
        self.scale = self.scale * 2  # rebound: a new tensor in _buffers
        self.calls += 1
        self.seen.append(self.calls)
        self.lin.note = "called"
        self.lin.register_forward_hook(lambda module, args, out: None)
        return self.lin(x) * self.scale + self.steps


def _state(module: torch.nn.Module) -> tuple[object, ...]:
    return (
        float(module.steps),
        module.scale.tolist(),
        module.calls,
        list(module.seen),
        hasattr(module.lin, "note"),
        len(module.lin._forward_hooks),
    )


def test_a_search_copies_the_module_once_and_restores_it_before_each_input_set() -> None:
    from pytest_aoti.checks.module_guard import ModuleCopies

    module = Stateful()
    first = _state(module)
    copies = ModuleCopies(module)
    start = copies.eager()
    assert start.buffers is None and start.attributes is None  # new: read it as it is
    eager = start.module
    assert eager is not module and eager.lin.weight is module.lin.weight
    x = torch.ones(1, 2)
    with torch.no_grad():
        expected = eager(x)
        eager(x)
    assert _state(eager) != first
    for _ in range(3):
        again = copies.eager()
        assert again.module is eager and copies.copies_made == 1
        assert _state(eager) == first and _state(module) == first
        assert again.buffers is not None and sorted(again.buffers) == ["scale", "steps"]
        assert again.attributes == plain_attributes(eager)
        with torch.no_grad():
            assert torch.equal(eager(x), expected)  # every use starts where the first did


def test_a_copy_holding_what_cannot_be_put_back_is_made_again_for_each_use() -> None:
    from pytest_aoti.checks.module_guard import ModuleCopies

    class Opaque:
        def __init__(self) -> None:
            self.count = 0

    module = torch.nn.Linear(2, 2)
    module.tracker = Opaque()  # a call may change it in place, unseen
    copies = ModuleCopies(module)
    made = [copies.eager().module for _ in range(3)]
    assert copies.copies_made == 3 and len({id(copy) for copy in made}) == 3

    resized = ModuleCopies(Stateful())
    eager = resized.eager().module
    eager.steps.resize_(4)  # a layout a copy of the values cannot put back
    assert resized.eager().module is not eager and resized.copies_made == 2


def test_the_float64_copy_is_made_once_and_restored_too() -> None:
    from pytest_aoti.checks.module_guard import ModuleCopies

    module = Stateful()
    copies = ModuleCopies(module)
    wide = copies.float64()
    assert wide.lin.weight.dtype == torch.float64 and module.lin.weight.dtype == torch.float32
    with torch.no_grad():
        wide(torch.ones(1, 2, dtype=torch.float64))
    assert copies.float64() is wide and float(wide.steps) == 0.0 and wide.calls == 0
    assert copies.copies_made == 1
