"""The module a call hands in is judged before anything is exported: a class, a ScriptModule,
a module in training mode whose layers train, each a usage error at the user's line that says
what to do; a torch.compile'd module is checked as its original module, with a note."""

from __future__ import annotations

from collections.abc import Callable

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
