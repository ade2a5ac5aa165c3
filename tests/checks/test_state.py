"""The engine's registered buffers, read back and compared with eager's after every call."""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_aoti.checks.state import BufferState, merge_states
from pytest_aoti.compiling.engine_state import open_state_engine

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# A counter that feeds no output. Compiled with the tests' ForgetsBufferState fault, the
# engine never carries it past one call (as pytorch/pytorch#165444 does on the torch releases
# that have it), and no output shows it.
CALL_COUNTER = """
class CallCounter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.calls += 1
        return x * 2
"""


def _report(path: Path) -> dict[str, dict[str, Any]]:
    return {record["test"]: record for record in json.loads(path.read_text())["checks"]}


@pytest.mark.compiles
def test_a_counter_that_feeds_no_output_fails_at_the_call_where_it_parts(
    run_aoti: Callable[..., pytest.RunResult],
    tmp_path: Path,
    run_isolated: Callable[[Path, Path], subprocess.CompletedProcess[str]],
    read_back_line: str,
) -> None:
    report = tmp_path / "aoti.json"
    bundles = tmp_path / "failed"
    result = run_aoti(
        CALL_COUNTER
        + """
def test_declared(aoti):
    aoti.check(
        CallCounter(),
        (torch.ones(3),),
        mutated_buffers={"calls"},
        calls=3,
        inductor_configs=forgets_buffer_state(),
    )

def test_undeclared(aoti):
    with pytest.raises(AotiCheckError) as excinfo:
        aoti.check(CallCounter(), (torch.ones(3),), inductor_configs=forgets_buffer_state())
    finding = excinfo.value.finding
    assert (finding.kind, finding.call, finding.stage) == ("buffer", 2, "compile")
    assert finding.extra["buffers"] == ["calls"]
    raise excinfo.value
""",
        "--aoti-localize=off",
        f"--aoti-report={report}",
        f"--aoti-keep-failed={bundles}",
    )
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "E * the AOTI compile broke it: buffer 'calls' differs between eager and the AOTI "
            "engine (call 2 of 3): 1 of 1 elements differ (exact comparison for torch.int64)",
            read_back_line,
            "E * worst at index (): eager=2 engine=1",
        ]
    )
    result.stdout.fnmatch_lines(
        ["E * buffer 'calls' differs between eager and the AOTI engine (call 2 of 2)*"]
    )
    records = _report(report)
    finding = records["test_inner.py::test_declared[cpu]"]["finding"]
    assert isinstance(finding, dict)
    assert (finding["kind"], finding["location"], finding["stage"]) == (
        "buffer",
        "buffer 'calls'",
        "compile",
    )
    # the repro bundle reproduces it with torch alone, reading the engine's buffer back
    (folder,) = [path for path in bundles.iterdir() if "test_declared" in path.name]
    assert json.loads((folder / "check.json").read_text())["buffers"] == ["calls"]
    run = run_isolated(folder / "repro.py", tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert (
        "REPRODUCED: the AOTI engine differs from eager (buffer difference at buffer 'calls')."
        in run.stdout
    )
    assert "buffer 'calls', call 2 of 3: 1 of 1 elements beyond" in run.stdout
    assert "The exported and the decomposed programs match eager" in run.stdout


@pytest.mark.compiles
def test_a_running_mean_passes_with_its_buffers_compared_after_every_call(
    run_aoti: Callable[..., pytest.RunResult], tmp_path: Path
) -> None:
    report = tmp_path / "aoti.json"
    result = run_aoti(
        """
def test_running_mean(aoti):
    result = aoti.check(RunningMean(), (torch.randn(4, 2),), calls=3)
    compared = [(context, leaf.location) for context, leaf in result.stats]
    for call in (1, 2, 3):
        assert (f"call {call} of 3", "buffer 'count'") in compared
        assert (f"call {call} of 3", "buffer 'mean'") in compared
    assert [(s.name, s.verified, s.calls_compared) for s in result.buffers] == [
        ("count", True, 3),
        ("mean", True, 3),
    ]
""",
        f"--aoti-report={report}",
    )
    result.assert_outcomes(passed=1)
    buffers = _report(report)["test_inner.py::test_running_mean[cpu]"]["buffers"]
    assert isinstance(buffers, list)
    assert [(b["name"], b["verified"], b["calls_compared"]) for b in buffers] == [
        ("count", True, 3),
        ("mean", True, 3),
    ]
    assert all(b["max_abs"] < 1e-5 and "reason" not in b for b in buffers)
    assert "not verified" not in result.stdout.str()


@pytest.mark.compiles
def test_the_kv_cache_example_compares_its_cache_buffers(
    pytester: pytest.Pytester, shared_cache_dir: Path, tmp_path: Path
) -> None:
    shutil.copy(EXAMPLES / "test_kv_cache.py", pytester.path / "test_kv_cache.py")
    report = tmp_path / "aoti.json"
    result = pytester.runpytest(
        "--aoti-device=cpu",
        f"--aoti-cache-dir={shared_cache_dir}",
        f"--aoti-report={report}",
        "-k",
        "buffers",
    )
    result.assert_outcomes(passed=1, deselected=5)
    (record,) = _report(report).values()
    assert [(b["name"], b["verified"], b["calls_compared"]) for b in record["buffers"]] == [
        ("k_cache", True, 3),
        ("v_cache", True, 3),
    ]
    assert record["extra_bytes_unmeasured"] is True  # max_extra_bytes still applies (CPU)


@pytest.mark.compiles
def test_without_the_runner_the_state_is_reported_not_verified(
    run_aoti: Callable[..., pytest.RunResult], pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """A torch without the runner API: the stuck counter cannot be seen, and the check says
    so in its record and the summary, declared or not, instead of passing in silence."""
    pytester.makeconftest(
        """
import pytest
import torch

@pytest.fixture(autouse=True)
def _torch_without_the_runner(monkeypatch):
    monkeypatch.delattr(torch._C._aoti, "AOTIModelContainerRunnerCpu")
"""
    )
    report = tmp_path / "aoti.json"
    result = run_aoti(
        CALL_COUNTER
        + """
def test_declared(aoti):
    result = aoti.check(CallCounter(), (torch.ones(3),), mutated_buffers={"calls"}, calls=3)
    assert [(s.name, s.verified) for s in result.buffers] == [("calls", False)]
""",
        f"--aoti-report={report}",
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*aoti: notes (not failures)*",
            "state of 'calls' not verified: this torch (*) has no AOTI runner for cpu to read "
            "buffers",
        ]
    )
    record = _report(report)["test_inner.py::test_declared[cpu]"]
    (buffer,) = record["buffers"]
    assert buffer["verified"] is False
    assert buffer["calls_compared"] == 0
    assert "no AOTI runner for cpu" in buffer["reason"]
    assert any("state of 'calls' not verified" in note for note in record["notes"])


# --- the read-back engine's fallbacks, without a compile -------------------------------


def _package(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


MODEL = "m/data/aotinductor/model/"


def test_a_device_without_a_runner_is_a_reason() -> None:
    reason = open_state_engine(Path("unused.pt2"), torch.device("meta"), ["calls"])
    assert reason == f"this torch ({torch.__version__}) has no AOTI runner for meta to read buffers"


def test_a_library_the_runner_cannot_load_is_a_reason(tmp_path: Path) -> None:
    package = _package(tmp_path / "p.pt2", {MODEL + "abc.wrapper.so": b"not a library"})
    reason = open_state_engine(package, torch.device("cpu"), ["calls"])
    assert isinstance(reason, str)
    assert reason.startswith("torch's AOTI runner could not load the package's library (")


def test_a_runner_whose_constructor_differs_is_a_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class OtherRunner:
        def __init__(self, path: str) -> None:  # another torch's signature
            pass

    monkeypatch.setattr(torch._C._aoti, "AOTIModelContainerRunnerCpu", OtherRunner)
    package = _package(tmp_path / "p.pt2", {MODEL + "abc.wrapper.so": b""})
    reason = open_state_engine(package, torch.device("cpu"), ["calls"])
    assert isinstance(reason, str)
    assert "could not load the package's library" in reason


def test_weights_outside_the_library_are_a_reason(tmp_path: Path) -> None:
    package = _package(
        tmp_path / "p.pt2",
        {MODEL + "abc.wrapper.so": b"", "m/data/weights/weight_0": b"\0" * 8},
    )
    reason = open_state_engine(package, torch.device("cpu"), ["calls"])
    assert reason == "the package keeps its weights outside its compiled library"


def test_unsafe_or_empty_packages_are_reasons(tmp_path: Path) -> None:
    empty = _package(tmp_path / "empty.pt2", {"m/archive_format": b"pt2"})
    assert open_state_engine(empty, torch.device("cpu"), ["x"]) == (
        "the package holds no single compiled model library"
    )
    unsafe = _package(
        tmp_path / "unsafe.pt2",
        {MODEL + "abc.wrapper.so": b"", "m/data/aotinductor/model/../../../../evil": b""},
    )
    reason = open_state_engine(unsafe, torch.device("cpu"), ["x"])
    assert isinstance(reason, str)
    assert "unsafe member name" in reason
    assert not (tmp_path / "evil").exists()
    broken = tmp_path / "broken.pt2"
    broken.write_bytes(b"not a zip")
    reason = open_state_engine(broken, torch.device("cpu"), ["x"])
    assert isinstance(reason, str)
    assert reason.startswith("the package's library could not be extracted")


def test_buffer_states_merge_over_input_sets() -> None:
    first = BufferState("mean", True, 2, 1e-7, 1e-6)
    second = BufferState("mean", True, 3, 3e-7, 1e-7)
    unread = BufferState("calls", False, reason="no runner")
    assert merge_states([first, unread, second]) == [
        unread,
        BufferState("mean", True, 5, 3e-7, 1e-6),
    ]
    assert merge_states([first, BufferState("mean", False, reason="r")]) == [
        BufferState("mean", False, 2, 1e-7, 1e-6, "r")
    ]
    assert unread.to_json() == {
        "name": "calls",
        "verified": False,
        "calls_compared": 0,
        "max_abs": 0.0,
        "max_rel": 0.0,
        "reason": "no runner",
    }
    assert "reason" not in first.to_json()


def test_a_runner_that_fails_mid_check_leaves_the_buffers_not_verified(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    from pytest_aoti.checks import state
    from pytest_aoti.tolerance import Tolerance

    class Failing:
        def __call__(self, *args: object) -> None:
            raise RuntimeError("run_func_ API call failed\nat some frame")

    monkeypatch.setattr(
        "pytest_aoti.compiling.engine_state.open_state_engine", lambda *a: Failing()
    )
    from pytest_aoti.compiling.accumulation import Accumulation

    program = SimpleNamespace(
        mutated_buffers={"calls"},
        package_path=Path("p.pt2"),
        device=torch.device("cpu"),
        accumulation=Accumulation(),
    )
    read_back = state.BufferReadBack(program, ((torch.ones(2),), {}), Tolerance())  # type: ignore[arg-type]
    assert read_back.after_call("call 1 of 2", {}) == []
    assert read_back.states == [
        BufferState(
            "calls",
            False,
            reason="torch's AOTI runner failed to run the call (run_func_ API call failed)",
        )
    ]


def test_a_library_without_the_buffers_is_a_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A package compiled with aot_inductor.package_constants_in_so=False (measured on torch
    2.13: its archive then holds no weights at all) gives a runner without its buffers."""
    import torch.utils._pytree as pytree

    class EmptyRunner:
        def __init__(self, path: str, models: int) -> None:
            pass

        def get_call_spec(self) -> list[str]:
            spec = pytree.treespec_dumps(pytree.tree_structure(((1,), {})))
            return [spec, pytree.treespec_dumps(pytree.tree_structure(1))]

        def get_constant_names_to_original_fqns(self) -> dict[str, str]:
            return {}

        def extract_constants_map(self, inactive: bool) -> dict[str, torch.Tensor]:
            return {}

    monkeypatch.setattr(torch._C._aoti, "AOTIModelContainerRunnerCpu", EmptyRunner)
    package = _package(tmp_path / "p.pt2", {MODEL + "abc.wrapper.so": b""})
    reason = open_state_engine(package, torch.device("cpu"), ["mean", "calls"])
    assert reason == "the package's compiled library does not hold 'calls', 'mean'"
