"""A search item (a values draw) costs little more than its two calls: the draws of a check
share one copy of the module, put back in its first state before each draw, and take the
engine calls the crash screen's child made for them instead of calling the engine again."""

from __future__ import annotations

from collections.abc import Callable

import pytest

pytestmark = pytest.mark.compiles

COUNTED = """
from pytest_aoti.checks import crash_screen, module_guard, served_calls


class Affine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)

    def forward(self, x):
        return torch.relu(self.lin(x))


class Accumulates(torch.nn.Module):
    \"\"\"Its buffer moves with every call: each draw must start from the exported value.\"\"\"

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self.register_buffer("total", torch.arange(2.0) + 0.5)

    def forward(self, x):
        self.total.add_(x.sum(0))
        return self.lin(x) + self.total


ONLY_VALUES = dict(probes="off", weights="off", cpp_loader=False, budget="off")


@pytest.fixture
def counted(monkeypatch):
    \"\"\"Copies of the module made for searches; answers of the child's calls; engines
    loaded here for calls the child did not make.\"\"\"
    seen = {"copies": 0, "answered": 0, "loaded": 0}
    copy, answer, loaded = (
        module_guard.eager_copy,
        crash_screen.InputSetCalls.answer,
        served_calls.ServedEngine.loaded,
    )

    def counted_copy(module):
        seen["copies"] += 1
        return copy(module)

    def counted_answer(self, inputs):
        found = answer(self, inputs)
        seen["answered"] += found is not None
        return found

    def counted_loaded(self):
        seen["loaded"] += 1
        return loaded(self)

    monkeypatch.setattr(module_guard, "eager_copy", counted_copy)
    monkeypatch.setattr(crash_screen.InputSetCalls, "answer", counted_answer)
    monkeypatch.setattr(served_calls.ServedEngine, "loaded", counted_loaded)
    return seen
"""


def test_draws_share_one_copy_and_take_the_childs_calls(
    run_aoti: Callable[..., pytest.RunResult],
) -> None:
    result = run_aoti(
        COUNTED
        + """

def test_plain(aoti, counted):
    module = Affine()
    result = aoti.check(module, (example(),), values_draws=8, **ONLY_VALUES)
    assert result.record.fields["values"]["checked"] == 8
    assert counted["copies"] == 1  # one copy of the module for the check's draws
    assert counted["answered"] == 8 and counted["loaded"] == 0  # no draw called it here


def test_stateful(aoti, counted):
    module = Accumulates()
    before = module.total.clone()
    result = aoti.check(module, (example(),), values_draws=3, **ONLY_VALUES)
    assert result.record.fields["values"]["checked"] >= 2
    assert counted["copies"] == 1  # put back before each draw, never copied again
    assert torch.equal(module.total, before)  # the caller's module never changes
"""
    )
    result.assert_outcomes(passed=2)
