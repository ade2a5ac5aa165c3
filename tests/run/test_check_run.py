"""The check protocol without a compile: phases run at their point, the engine loaded once
and handed out in its exported state, a check's own record fields, the eager module copied
only where a call may change its state (field by field where ``copy.deepcopy`` cannot), and
the finding kind of a missed expected value."""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch

from pytest_aoti.checks.base import SERVED_FROM_BYTES, CheckContext, CheckPlan, Outcome, RecordPart
from pytest_aoti.checks.budget import LARGE_FROM_BYTES, CheckBudget
from pytest_aoti.checks.parity import _expectation_or
from pytest_aoti.checks.side_by_side import call_history, eager_module
from pytest_aoti.compare import assert_values
from pytest_aoti.errors import AotiCheckError
from pytest_aoti.plugins import default_catalog
from pytest_aoti.reports.records import CheckRecord
from pytest_aoti.run import catalog
from pytest_aoti.run.phases import PlanRun
from pytest_aoti.tolerance import Tolerance


class Recorded:
    """A check of one phase that notes when it ran and what the context held then."""

    def __init__(self, name: str, phase: str, seen: list[str], figure: int = 0) -> None:
        self.name = name
        self.phase = phase
        self._seen = seen
        self._figure = figure

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        return True

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        held = "program" if context.compiled is not None else "exported" if context.exported else ""
        self._seen.append(f"{self.name}:{held}")
        return Outcome(
            figures={self.name: self._figure},
            record=RecordPart({f"{self.name}_level": self._figure}, notes=(f"{self.name} ran",)),
        )


def _plan() -> CheckPlan:
    return CheckPlan(module=torch.nn.Identity(), input_sets=[((), {})], tolerance=None)


def test_each_phase_runs_its_checks_at_its_point(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    checks = [
        Recorded("late", "engine", seen, 2),
        Recorded("first", "eager", seen),
        Recorded("graph", "exported", seen),
        Recorded("later", "engine", seen, 3),
    ]
    monkeypatch.setattr(catalog, "CHECKS", checks)
    run = PlanRun(_plan(), CheckContext(device=torch.device("cpu")))
    run.run("eager")
    assert seen == ["first:"]
    exported = torch.export.export(torch.nn.Dropout(0.5).train(), (torch.ones(3),))
    run.exported(exported)
    assert seen == ["first:", "graph:exported"]
    assert [op.op for op in run.context.random_ops] == ["aten.dropout.default"]  # read once
    program = types.SimpleNamespace(
        mutated_buffers={"counter"}, compile_seconds=40.0, package_bytes=0, exported=exported
    )
    run.compiled(program, None)  # type: ignore[arg-type]
    assert run.context.calls == 2  # buffer state: two calls by default
    # sized by the program's weights and example (no weights here), never the clock
    assert run.context.budget.program_bytes == 0
    assert run.context.budget.calls == 2
    result = run.run_engine_checks()
    assert seen[2:] == ["late:program", "later:program"]
    # the result lists the checks of the compiled program; every figure and record part
    assert result.checks == ("late", "later")
    assert result.figures == {"first": 0, "graph": 0, "late": 2, "later": 3}
    assert result.record.fields["later_level"] == 3
    assert result.record.notes == ("first ran", "graph ran", "late ran", "later ran")
    # how long each check took, and how deep the searches went
    assert set(result.record.fields["seconds_by_check"]) == {"first", "graph", "late", "later"}
    assert result.record.fields["budget"] == {
        "share": 0.05,
        "program_bytes": 0,
        "allowance_bytes": None,
        "checks": {},
    }


def test_a_failing_phase_ends_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    class Fails:
        name, phase = "fails", "eager"

        def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
            return True

        def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
            raise AotiCheckError("eager failed")

    seen: list[str] = []
    monkeypatch.setattr(catalog, "CHECKS", [Fails(), Recorded("after", "eager", seen)])
    with pytest.raises(AotiCheckError, match="eager failed"):
        PlanRun(_plan(), CheckContext(device=torch.device("cpu"))).run("eager")
    assert seen == []


class LoRA(torch.nn.Module):
    """Built only with its dimension: ``copy.deepcopy`` calls ``LoRA.__new__(LoRA)``."""

    def __new__(cls, dim: int) -> LoRA:
        return super().__new__(cls)

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.down = torch.nn.Parameter(torch.randn(dim, 2))


def test_an_export_s_eager_checks_run_on_a_copy_of_a_module_deepcopy_refuses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran_on: list[torch.nn.Module] = []

    class Sees(Recorded):
        def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
            ran_on.append(plan.module)
            return Outcome()

    monkeypatch.setattr(catalog, "CHECKS", [Sees("sees", "eager", [])])
    module = LoRA(3)
    run = PlanRun(
        CheckPlan(module=module, input_sets=(((), {}),), tolerance=Tolerance()),
        CheckContext(device=torch.device("cpu")),
    )
    run.run_on_full_copy("eager")
    assert len(ran_on) == 1 and type(ran_on[0]) is LoRA and ran_on[0] is not module
    assert run.plan.module is module


def test_the_engine_is_loaded_once_and_fresh_engines_come_after_use() -> None:
    loads: list[int] = []

    def load() -> Any:
        loads.append(1)
        return f"engine {len(loads)}"

    context = CheckContext(device=torch.device("cpu"))
    with pytest.raises(RuntimeError, match="engine phase"):
        context.engine()  # no program before the compile
    stateful = types.SimpleNamespace(engine_in_exported_state=load, mutated_buffers={"counter"})
    context.compiled = stateful  # type: ignore[assignment]
    assert context.fresh_engine() == "engine 1"  # the shared one, while nobody called it
    assert context.engine() == "engine 1"  # loaded once, whatever the order of the checks
    assert context.fresh_engine() == "engine 2"  # the shared one was handed out already
    assert context.engine() == "engine 1"
    assert len(loads) == 2

    measuring_first = CheckContext(device=torch.device("cpu"))
    loads.clear()
    measuring_first.compiled = stateful  # type: ignore[assignment]
    assert measuring_first.engine() == "engine 1"
    assert measuring_first.fresh_engine() == "engine 2"  # never the measured one


def test_without_buffer_state_the_checks_share_one_engine_loaded_here_on_first_need() -> None:
    loads: list[int] = []

    def load() -> Any:
        loads.append(1)
        return f"engine {len(loads)}"

    def program(size: int) -> Any:
        return types.SimpleNamespace(
            engine_in_exported_state=load, mutated_buffers=set(), package_bytes=size
        )

    context = CheckContext(device=torch.device("cpu"))
    context.compiled = program(SERVED_FROM_BYTES)
    assert context.served_by_child()
    engine = context.engine()
    assert context.fresh_engine() is engine and context.engine() is engine
    assert loads == []  # the engine child's answers may serve every call
    assert context.local_engine() == "engine 1" == context.local_engine()
    assert loads == [1]

    # a small package: a second load costs less than the child's start; loaded here at once
    small = CheckContext(device=torch.device("cpu"))
    small.compiled = program(SERVED_FROM_BYTES - 1)
    assert not small.served_by_child()
    assert small.engine() == "engine 2" == small.fresh_engine() == small.local_engine()
    assert small.engine_calls() is None and loads == [1, 1]

    # loading a large program again (a weight swap, the C++ runner) is left to budget="off"
    assert not context.another_load_over_budget(), "no budget: budget='off'"
    context.budget = CheckBudget.of(0.05, program_bytes=LARGE_FROM_BYTES)
    small.budget = CheckBudget.of(0.05, program_bytes=LARGE_FROM_BYTES - 1)
    assert context.another_load_over_budget() and not small.another_load_over_budget()


def test_eager_runs_a_copy_that_shares_the_weights_and_owns_the_rest() -> None:
    norm = torch.nn.BatchNorm1d(2)
    norm.calls = 0
    copied = eager_module(norm)
    assert copied is not norm and copied.weight is norm.weight  # no second copy of weights
    assert copied.running_mean is not norm.running_mean  # buffers are the copy's own
    copied.calls += 1
    copied(torch.randn(4, 2))  # training mode: the running stats move
    assert norm.calls == 0 and float(norm.running_mean.abs().sum()) == 0.0


def test_call_history_clones_inputs_and_leaves_the_module_alone() -> None:
    class Count(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls.add_(1)
            x.mul_(2)
            return x + self.calls

    module, x = Count(), torch.ones(2)
    exported = torch.export.export(Count(), (torch.ones(2),))
    history = call_history(
        types.SimpleNamespace(exported=exported), module, (x,), {}, 2, eager=True
    )  # type: ignore[arg-type]
    assert [out.tolist() for out, _ in history] == [[3.0, 3.0], [6.0, 6.0]]  # state carries
    assert [named["x"].tolist() for _, named in history] == [[2.0, 2.0], [4.0, 4.0]]
    assert x.tolist() == [1.0, 1.0] and float(module.calls) == 0.0  # the caller's, untouched


def _missed(expected: torch.Tensor, engine: torch.Tensor) -> AotiCheckError:
    try:
        assert_values(expected, engine, location="input 'x'", tolerance=Tolerance())
    except AotiCheckError as error:
        return error
    raise AssertionError("the engine's value was accepted")


def test_a_missed_expected_value_is_its_own_kind_unless_eager_misses_it_too() -> None:
    expected, engine = torch.full((3,), 2.0), torch.full((3,), 5.0)
    tolerance = Tolerance()
    error = _missed(expected, engine)
    assert error.kind == "output"  # how compare words a value the test gave
    engine_fault = _expectation_or(error, expected, expected.clone(), "input 'x'", "", tolerance)
    assert engine_fault.kind == "expected value"
    assert "input 'x'" in str(engine_fault)
    wrong_expectation = _expectation_or(error, expected, engine.clone(), "input 'x'", "", tolerance)
    assert wrong_expectation.kind == "expectation"


def test_a_check_s_own_record_fields_reach_the_json_and_come_back() -> None:
    run = default_catalog()
    record = CheckRecord("t.py::test", "cpu", "key", False, 0.0, 0.0)
    record.other_fields = run.record_fields()  # as a run's records start
    record.update({"engine_seconds": 0.5, "probe_level": 3})
    assert record.engine_seconds == 0.5  # a declared field
    data = record.to_json()
    assert data["probe_level"] == 3 and "other_fields" not in data
    declared = CheckRecord(
        "t.py::test", "cpu", "key", False, 0.0, 0.0, other_fields=run.record_fields()
    ).to_json()
    assert list(data) == [*list(declared)[:-1], "probe_level", "engine_over_eager"]
    again = CheckRecord.from_json(data)
    # every feature's fields are in every record, with their values where it did not run
    expected = {**run.record_fields(), "probe_level": 3}
    assert again.other_fields == expected and again.to_json() == data


class Level:
    """A new check with a figure of its own: its record part is all it touches."""

    name, phase = "level", "engine"

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        return True

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        engine = context.engine()  # the shared engine, whatever ran before
        assert engine is context.engine()
        return Outcome(
            figures={"level": 3},
            record=RecordPart(
                {"level": 3}, notes=("level noted",), properties=(("aoti_level_by", "level"),)
            ),
        )


@pytest.mark.compiles
def test_a_new_check_s_figure_reaches_the_result_json_and_junit(
    monkeypatch: pytest.MonkeyPatch, run_aoti, pytester: pytest.Pytester
) -> None:
    import json
    import xml.etree.ElementTree as ElementTree

    monkeypatch.setattr(catalog, "CHECKS", [*catalog.CHECKS, Level()])
    result = run_aoti(
        """
        def test_level(aoti):
            result = aoti.check(DoubleThenCos(), (example(),))
            assert result.figures["level"] == 3 and "level" in result.checks
        """,
        "--aoti-report=report.json",
        "--junitxml=junit.xml",
    )
    result.assert_outcomes(passed=1)
    (check,) = json.loads((pytester.path / "report.json").read_text())["checks"]
    assert check["level"] == 3 and "level noted" in check["notes"]
    assert check["engine_seconds"] is not None  # timing's own fields, set as before
    properties = {
        prop.get("name"): prop.get("value")
        for prop in ElementTree.parse(pytester.path / "junit.xml").iter("property")
    }
    assert properties["aoti_level"] == "3" and properties["aoti_level_by"] == "level"
