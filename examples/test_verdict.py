"""Checks that fail before any compile: a program that draws random numbers (dropout left
in training mode) and a module that fails in eager PyTorch by itself."""

import pytest
import torch

from pytest_aoti import AotiCheckError


@pytest.mark.aoti
def test_dropout_in_training_mode_is_a_random_program(aoti):
    """Eager and the engine draw different dropout masks: no comparison means anything,
    so the check fails, naming the op and the line, and says what to do."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5))  # training mode
    with pytest.raises(AotiCheckError, match=r"draws random numbers \(aten\.dropout\.default\)"):
        aoti.check(model, (torch.randn(4, 8),))


@pytest.mark.aoti
def test_an_eager_error_fails_before_compiling(aoti):
    """An int64 input to nn.Linear fails in eager PyTorch: stage "eager", no compile."""
    with pytest.raises(AotiCheckError, match="eager PyTorch fails on the example") as failure:
        aoti.check(torch.nn.Linear(4, 2), (torch.ones(3, 4, dtype=torch.int64),))
    assert failure.value.stage == "eager"
