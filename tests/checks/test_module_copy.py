"""A module ``copy.deepcopy`` cannot copy (a submodule whose ``__new__`` takes required
arguments, as a library's LoRA layer does) is copied field by field, without a compile: eager's
copy shares its Parameters and owns the rest, the module guard's checks hold on it, the float64
copies own their weights, and the record's note says why and what is shared."""

from __future__ import annotations

import copy
import threading
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from pytest_aoti.checks.float64 import Float64Reference
from pytest_aoti.checks.module_copy import copy_module, copy_refusal
from pytest_aoti.checks.module_guard import (
    ModuleCopies,
    assert_weights_unwritten,
    changes_between,
    eager_copy,
    plain_attributes,
    weight_versions,
)
from pytest_aoti.errors import AotiUsageError


class LoRA(torch.nn.Module):
    """Built only with its dimensions: ``copy.deepcopy`` calls ``LoRA.__new__(LoRA)``."""

    made = 0
    calls: torch.Tensor

    def __new__(cls, dim_in: int, dim_out: int, rank: int = 2) -> LoRA:
        cls.made += 1
        return super().__new__(cls)

    def __init__(self, dim_in: int, dim_out: int, rank: int = 2) -> None:
        super().__init__()
        self.down = torch.nn.Parameter(torch.randn(dim_in, rank))
        self.up = torch.nn.Parameter(torch.randn(rank, dim_out))
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        return x @ self.down @ self.up


class Adapted(torch.nn.Module):
    steps: torch.Tensor
    head: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.base = torch.nn.Linear(4, 4)
        self.lora = LoRA(4, 4)
        self.again = self.lora  # one submodule under two names
        self.register_buffer("steps", torch.zeros(4))
        self.register_buffer("head", self.steps[:2], persistent=False)  # a view of steps
        self.seen: list[int] = []
        self.label = "adapted"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.steps.add_(1)
        self.seen.append(1)
        out: torch.Tensor = self.base(x) + self.lora(x) + self.steps
        return out


def test_eager_s_copy_of_a_module_deepcopy_refuses_shares_the_weights_and_owns_the_rest() -> None:
    module: Any = Adapted()
    with pytest.raises(TypeError, match="missing 2 required positional arguments"):
        copy.deepcopy(module)
    made = LoRA.made
    state = {name: value.clone() for name, value in module.state_dict().items()}
    eager: Any = eager_copy(module)
    assert LoRA.made == made, "no LoRA.__new__ call"
    assert type(eager.lora) is LoRA and eager.lora is not module.lora
    assert eager.again is eager.lora, "a submodule reached twice stays one"
    assert eager.lora.down is module.lora.down and eager.base.weight is module.base.weight
    assert eager.steps is not module.steps and eager.lora.calls is not module.lora.calls
    assert eager.head.untyped_storage().data_ptr() == eager.steps.untyped_storage().data_ptr()
    assert eager.seen is not module.seen
    before = plain_attributes(eager)
    versions = weight_versions(eager)
    with torch.no_grad():
        eager(torch.randn(2, 4))
    assert_weights_unwritten(eager, versions)
    assert [change.path for change in changes_between(before, plain_attributes(eager))] == []
    assert eager.seen == [1] and float(eager.lora.calls) == 1.0
    assert module.seen == [] and module.label == "adapted"
    for name, value in module.state_dict().items():
        assert torch.equal(value, state[name]), name
    refusal = copy_refusal(module)
    assert refusal is not None and refusal.shared == ()
    assert refusal.note().startswith(
        "the module could not be deep-copied (TypeError: LoRA.__new__() missing 2 required "
        "positional arguments: 'dim_in' and 'dim_out'): the copies the check runs, so that "
        "your module never changes, were built field by field"
    )


def test_a_written_parameter_and_a_changed_attribute_are_still_found_on_the_copy() -> None:
    class Writes(Adapted):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.label = "called"
            with torch.no_grad():
                self.lora.up.mul_(2)
            return super().forward(x)

    module = Writes()
    eager: Any = eager_copy(module)
    before, versions = plain_attributes(eager), weight_versions(eager)
    eager(torch.randn(2, 4))
    assert [change.path for change in changes_between(before, plain_attributes(eager))] == [
        "self.label"
    ]
    with pytest.raises(AotiUsageError, match="forward writes Parameter 'lora.up' in place"):
        assert_weights_unwritten(eager, versions)


def test_an_attribute_that_cannot_be_copied_is_shared_and_named() -> None:
    module: Any = torch.nn.Linear(2, 2)
    module.lock = threading.Lock()
    module.sizes = [2, 2]
    eager: Any = eager_copy(module)
    assert eager.lock is module.lock and eager.sizes == [2, 2] and eager.sizes is not module.sizes
    assert eager.weight is module.weight
    refusal = copy_refusal(module)
    assert refusal is not None and refusal.shared == ("self.lock",)
    assert refusal.note().endswith(
        "; self.lock cannot be copied either and is shared with your module"
    )
    assert copy_refusal(eager) == refusal, "a copy of the copy goes field by field at once"


def test_a_buffer_that_cannot_be_copied_is_still_a_usage_error() -> None:
    class Stubborn(torch.Tensor):
        def __deepcopy__(self, memo: dict[int, Any]) -> Any:
            raise RuntimeError("this tensor stays where it is")

    module = torch.nn.Linear(2, 2)
    module.register_buffer("pinned", torch.zeros(2).as_subclass(Stubborn))
    with pytest.raises(AotiUsageError, match="the module cannot be copied .RuntimeError: this"):
        eager_copy(module)


def test_a_failed_field_leaves_nothing_half_built_in_the_memo() -> None:
    module: Any = torch.nn.Linear(2, 2)
    holder = [torch.zeros(1), threading.Lock()]  # its copy fails halfway
    module.first = holder
    module.second = holder
    copied: Any = copy_module(module)
    assert copied.first is holder and copied.second is holder
    assert copied.weight is not module.weight, "no memo: the Parameters are copied too"
    refusal = copy_refusal(module)
    assert refusal is not None and refusal.shared == ("self.first", "self.second")


def test_a_refusal_is_kept_by_identity_while_its_module_lives() -> None:
    class Compared(LoRA):
        def __eq__(self, other: object) -> bool:  # any two are equal: no lookup by ==
            return isinstance(other, Compared)

        __hash__ = torch.nn.Module.__hash__

    module, other = Compared(2, 2), Compared(2, 2)
    first = copy_module(module)
    assert type(first) is Compared and first.down is not module.down
    assert copy_refusal(module) is not None and copy_refusal(first) is not None
    assert copy_refusal(other) is None
    from pytest_aoti.checks import module_copy

    known = len(module_copy._REFUSED)
    del first
    assert len(module_copy._REFUSED) == known - 1


def test_the_float64_copies_own_their_weights() -> None:
    module: Any = Adapted()
    wide: Any = ModuleCopies(module).float64()
    assert wide.lora.down.dtype == torch.float64 and wide.lora.down is not module.lora.down
    assert module.lora.down.dtype == torch.float32
    exported = torch.export.export(torch.nn.Linear(4, 4), (torch.randn(2, 4),))
    program: Any = SimpleNamespace(exported=exported)
    reference = Float64Reference(program, module, (torch.randn(2, 4),), {})
    outputs = reference.outputs_after(1)()
    assert outputs.dtype == torch.float64 and module.lora.down.dtype == torch.float32
    assert module.seen == [] and float(module.steps.sum()) == 0.0


def test_a_module_the_memo_maps_is_left_to_the_memo() -> None:
    module = Adapted()
    base = module.base
    copied: Any = copy_module(module, {id(base): base})
    assert copied.base is base and copied.lora is not module.lora
    assert vars(base)["_parameters"] is vars(module.base)["_parameters"], "base left as it is"
