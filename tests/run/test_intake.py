"""The module a call hands in is judged before anything is exported: a class, a ScriptModule,
a module in training mode whose layers train, each a usage error at the user's line that says
what to do; a torch.compile'd module is checked as its original module, with a note; one
``copy.deepcopy`` refuses is moved to the device as a copy built field by field."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from pytest_aoti import AotiUsageError, CheckDefaults
from pytest_aoti.run.resolve import resolve_call

PLUGIN_FRAME = "pytest_aoti/"


class TrainingConv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))


@pytest.mark.compiles
def test_each_module_handed_in_wrong_is_named_for_what_it_is(
    run_aoti: Callable[..., pytest.RunResult],
) -> None:
    result = run_aoti(
        """
        class TrainingConv(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv2d(3, 4, 3)
                self.bn = torch.nn.BatchNorm2d(4)

            def forward(self, x):
                return self.bn(self.conv(x))

        def test_the_class(aoti):
            aoti.check(DoubleThenCos, (example(),))

        def test_scripted(aoti):
            import warnings

            with warnings.catch_warnings():  # newer torch deprecates torch.jit.script
                warnings.simplefilter("ignore", FutureWarning)
                scripted = torch.jit.script(DoubleThenCos())
            aoti.check(scripted, (example(),))

        def test_training_mode(aoti):
            aoti.check(TrainingConv(), (torch.randn(2, 3, 8, 8),))

        def test_compiled(aoti):
            x = example()
            aoti.check(torch.compile(DoubleThenCos()), (x,), mutates={"x": example() * 2})
            assert torch.equal(x, example())
        """,
        "--aoti-report=r.json",
    )
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines(
        ["E *AotiUsageError: pass an instance: DoubleThenCos(), not the class"]
    )
    result.stdout.fnmatch_lines(
        [
            "E *AotiUsageError: torch.export cannot export a ScriptModule: pass the nn.Module "
            "you scripted"
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "E *AotiUsageError: the module is in training mode: 'bn' updates its running "
            "statistics on every call; call model.eval() to check inference, or pass "
            "training=True to check the training-mode program"
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*aoti: notes (not failures)*",
            "a torch.compile'd module was handed in: the check uses its original module "
            "(DoubleThenCos, from _orig_mod)*",
        ]
    )
    failures = result.stdout.str().split("= FAILURES =")[1].split("short test summary")[0]
    assert PLUGIN_FRAME not in failures.replace("pytest_aoti/errors", "errors"), failures
    assert "eager PyTorch fails" not in failures and "known torch bug" not in failures


def test_training_true_checks_a_training_mode_program_on_purpose() -> None:
    module = TrainingConv()
    x = torch.randn(2, 3, 8, 8)
    with pytest.raises(AotiUsageError, match="the module is in training mode: 'bn'"):
        resolve_call(CheckDefaults(), torch.device("cpu"), module, (x,))
    plan = resolve_call(
        CheckDefaults(), torch.device("cpu"), module, (x,), options={"training": True}
    )
    assert plan.module is module and plan.options.training
    resolve_call(CheckDefaults(), torch.device("cpu"), TrainingConv().eval(), (x,))
    untracked = torch.nn.BatchNorm2d(3, track_running_stats=False)  # nothing to update
    resolve_call(CheckDefaults(), torch.device("cpu"), untracked, (x[:, :, :3],))


def test_a_bare_training_layer_is_named_by_its_class() -> None:
    with pytest.raises(AotiUsageError, match="training mode: the BatchNorm1d updates"):
        resolve_call(
            CheckDefaults(), torch.device("cpu"), torch.nn.BatchNorm1d(2), (torch.ones(3, 2),)
        )


class LoRA(torch.nn.Module):
    """Built only with its dimensions: ``copy.deepcopy`` calls ``LoRA.__new__(LoRA)``."""

    def __new__(cls, dim_in: int, dim_out: int) -> LoRA:
        return super().__new__(cls)

    def __init__(self, dim_in: int, dim_out: int) -> None:
        super().__init__()
        self.down = torch.nn.Parameter(torch.randn(dim_in, 2))
        self.up = torch.nn.Parameter(torch.randn(2, dim_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.down @ self.up


def test_a_module_deepcopy_refuses_is_moved_to_the_device_as_a_copy_built_field_by_field() -> None:
    module = torch.nn.Sequential(torch.nn.Linear(4, 4), LoRA(4, 4))
    plan = resolve_call(CheckDefaults(), torch.device("meta"), module, (torch.randn(2, 4),))
    moved: Any = plan.module
    assert moved is not module and type(moved[1]) is LoRA
    assert moved[1].down.device.type == "meta" and moved[0].weight.device.type == "meta"
    assert all(p.device.type == "cpu" for p in module.parameters())
