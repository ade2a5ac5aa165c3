"""The caller's module never changes (pure logic: export only): eager runs a copy that
shares the weights, a Parameter the program writes is found before any eager call, and a
Python attribute a call changes is named."""

from __future__ import annotations

import pytest
import torch

from pytest_aoti.checks.module_guard import (
    assert_weights_unwritten,
    attribute_changes,
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
    changes = attribute_changes(before, copy)
    assert [change.path for change in changes] == ["self.calls", "self.block.seen"]
    assert describe_changes(changes).startswith(
        "forward changes self.calls, self.block.seen, Python attributes: torch.export froze "
        "their values at export"
    )
    with pytest.raises(AotiUsageError, match="forward writes Parameter 'w' in place"):
        assert_weights_unwritten(copy, versions)
    assert module.calls == 0 and module.block.seen == () and float(module.steps) == 0.0


def test_a_module_that_cannot_be_copied_is_a_usage_error() -> None:
    import threading

    module = torch.nn.Linear(2, 2)
    module.lock = threading.Lock()
    with pytest.raises(AotiUsageError, match="the module cannot be copied"):
        eager_copy(module)
