"""The default check on the inputs and modules users hand it: a 0-dim position, a 0-dim
temperature, a sliced or expanded example and a Python float output pass; the caller's
module never changes, also where ``copy.deepcopy`` cannot copy it; a forward that changes a
Python attribute or writes a Parameter in place is named."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

FORMS = """
class KVCacheAt(torch.nn.Module):
    def forward(self, cache, row, position):
        cache.index_copy_(0, position.reshape(1), row)
        return cache.sum(dim=0)


class Temperature(torch.nn.Module):
    def forward(self, logits, temperature):
        return torch.softmax(logits / temperature, dim=-1)


class Affine(torch.nn.Module):
    def forward(self, x):
        return x * 2 + 1


class Total(torch.nn.Module):
    def forward(self, x):
        return x.sum().item()


def test_position(aoti):
    torch.manual_seed(0)
    cache, row = torch.zeros(16, 4), torch.randn(1, 4)
    expected = cache.clone()
    expected[5] = row[0]
    aoti.check(KVCacheAt(), (cache, row, torch.tensor(5)), mutates={"cache": expected})
    assert float(cache.abs().sum()) == 0.0  # the caller's cache is untouched


def test_temperature(aoti):
    torch.manual_seed(0)
    aoti.check(Temperature(), (torch.randn(3, 8), torch.tensor(0.7)))


def test_sliced(aoti):
    torch.manual_seed(0)
    aoti.check(Affine(), (torch.randn(3, 8)[:, ::2],))


def test_expanded(aoti):
    torch.manual_seed(0)
    aoti.check(Affine(), (torch.randn(1, 4).expand(3, 4),))


def test_item(aoti):
    torch.manual_seed(0)
    aoti.check(Total(), (torch.randn(16),))
"""


@pytest.mark.compiles
def test_0_dim_sliced_expanded_inputs_and_a_python_float_pass_by_default(
    run_aoti: Callable[..., pytest.RunResult], tmp_path: Path
) -> None:
    report = tmp_path / "aoti.json"
    result = run_aoti(FORMS, f"--aoti-report={report}")
    result.assert_outcomes(passed=5)
    records = {r["test"].split("::")[-1]: r for r in json.loads(report.read_text())["checks"]}
    for name in ("test_position", "test_temperature", "test_sliced", "test_expanded"):
        values = records[f"{name}[cpu]"]["values"]
        assert values["checked"] + values["refused"] == values["draws"] > 0, (name, values)
    assert (
        records["test_item[cpu]"]["values"]["checked"]
        == records["test_item[cpu]"]["values"]["draws"]
    )


ATTRIBUTES = """
class Counts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x + self.calls


class BuildsOnce(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ready = False

    def forward(self, x):
        self.ready = True
        return x * 3


class WritesWeight(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(4))

    def forward(self, x):
        with torch.no_grad():
            self.w.add_(1)
        return x * self.w


def test_counter(aoti):
    module = Counts()
    try:
        aoti.check(module, (torch.randn(4),))
    finally:
        assert module.calls == 0


def test_lazy(aoti):
    module = BuildsOnce()
    aoti.check(module, (torch.randn(4),))
    assert module.ready is False


def test_weight(aoti):
    module = WritesWeight()
    try:
        aoti.check(module, (torch.randn(4),))
    finally:
        assert module.w.tolist() == [1.0, 1.0, 1.0, 1.0]
"""


@pytest.mark.compiles
def test_python_attributes_and_parameter_writes_are_named_and_the_module_unchanged(
    run_aoti: Callable[..., pytest.RunResult], tmp_path: Path
) -> None:
    report = tmp_path / "aoti.json"
    result = run_aoti(ATTRIBUTES, f"--aoti-report={report}", "-rA")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "E * torch.export broke it: forward changes self.calls, a Python attribute: "
            "torch.export froze its value at export, so the engine never changes it; keep "
            "state in a registered buffer: output differs between eager and the AOTI engine "
            "(call 2 of 2)*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "E * forward writes Parameter 'w' in place: an AOTI engine cannot write a weight "
            "back*keep state that changes in a registered buffer*",
        ]
    )
    assert "treespec" not in result.stdout.str()
    records = {r["test"].split("::")[-1]: r for r in json.loads(report.read_text())["checks"]}
    assert records["test_counter[cpu]"]["finding"]["kind"] == "python attribute"
    assert records["test_counter[cpu]"]["finding"]["stage"] == "export"
    assert any(
        "forward changes self.ready" in note and "still match" in note
        for note in records["test_lazy[cpu]"]["notes"]
    )
    assert "test_weight[cpu]" not in records  # refused before anything was compiled


UNCHANGED = """
import copy


class Stateful(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.norm = torch.nn.BatchNorm1d(4).eval()
        self.register_buffer("steps", torch.zeros(4))
        self.history = []
        self.label = "model"

    def forward(self, x):
        self.steps.add_(x.mean(0))
        return self.norm(self.linear(x)) + self.steps


def snapshot(module):
    state = {name: value.clone() for name, value in module.state_dict().items()}
    plain = {k: copy.copy(v) for k, v in vars(module).items() if not k.startswith("_")}
    return state, plain, [id(p) for p in module.parameters()]


def assert_unchanged(module, before):
    state, plain, ids = snapshot(module)
    assert ids == before[2]
    assert plain == before[1]
    assert state.keys() == before[0].keys()
    for name in state:
        assert torch.equal(state[name], before[0][name]), name


@pytest.mark.parametrize("options", [
    {},
    {"threads": 2, "mutated_buffers": {"steps"}},
    {"dynamic_shapes": {"x": {0: torch.export.Dim("batch", min=2, max=8)}}, "examples": 3},
    {"samples": [(torch.randn(5, 4),)], "dynamic_shapes": "auto", "values": "edge"},
])
def test_each_kind_of_check(aoti, options):
    torch.manual_seed(0)
    module = Stateful()
    before = snapshot(module)
    try:
        aoti.check(module, (torch.randn(3, 4),), **options)
    except pytest_aoti.AotiCheckError:
        pass  # what matters here is the module
    assert_unchanged(module, before)
"""


@pytest.mark.compiles
def test_the_caller_s_module_is_unchanged_by_every_kind_of_check(
    run_aoti: Callable[..., pytest.RunResult],
) -> None:
    result = run_aoti("import pytest_aoti\n" + UNCHANGED)
    result.assert_outcomes(passed=4)


DEEPCOPY_REFUSES = """
import copy


class LoRA(torch.nn.Module):
    def __new__(cls, dim_in, dim_out, rank=2):  # copy.deepcopy calls LoRA.__new__(LoRA)
        return super().__new__(cls)

    def __init__(self, dim_in, dim_out, rank=2):
        super().__init__()
        self.down = torch.nn.Parameter(torch.randn(dim_in, rank))
        self.up = torch.nn.Parameter(torch.randn(rank, dim_out))

    def forward(self, x):
        return x @ self.down @ self.up


class Adapted(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.base = torch.nn.Linear(4, 4)
        self.lora = LoRA(4, 4)
        self.register_buffer("steps", torch.arange(4.0))
        self.history = [1]
        self.label = "adapted"

    def forward(self, x):
        self.steps.add_(x.mean(0))
        return self.base(x) + self.lora(x) + self.steps


def test_adapted(aoti):
    torch.manual_seed(0)
    module = Adapted()
    with pytest.raises(TypeError, match="required positional arguments: 'dim_in'"):
        copy.deepcopy(module)
    state = {name: value.clone() for name, value in module.state_dict().items()}
    versions = {name: p._version for name, p in module.named_parameters()}
    plain = {k: copy.copy(v) for k, v in vars(module).items() if not k.startswith("_")}
    held = [id(p) for p in module.parameters()] + [id(b) for b in module.buffers()]
    aoti.check(module, (torch.randn(3, 4),), mutated_buffers={"steps"})
    assert {name: p._version for name, p in module.named_parameters()} == versions
    assert [id(p) for p in module.parameters()] + [id(b) for b in module.buffers()] == held
    assert {k: v for k, v in vars(module).items() if not k.startswith("_")} == plain
    assert state.keys() == module.state_dict().keys()
    for name, value in module.state_dict().items():
        assert torch.equal(value, state[name]), name
"""


@pytest.mark.compiles
def test_a_module_deepcopy_refuses_is_checked_on_copies_built_field_by_field(
    run_aoti: Callable[..., pytest.RunResult], tmp_path: Path
) -> None:
    report = tmp_path / "aoti.json"
    result = run_aoti(DEEPCOPY_REFUSES, f"--aoti-report={report}")
    result.assert_outcomes(passed=1)
    (record,) = json.loads(report.read_text())["checks"]
    assert record["outcome"] == "passed"
    assert any(
        note.startswith(
            "the module could not be deep-copied (TypeError: LoRA.__new__() missing 2 "
            "required positional arguments: 'dim_in' and 'dim_out'): the copies the check "
            "runs, so that your module never changes, were built field by field"
        )
        for note in record["notes"]
    ), record["notes"]
