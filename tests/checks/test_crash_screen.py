"""The crash screen: an engine that kills its process fails its test, and the run goes on.

The fault is the suite's own: a custom op whose CPU kernel calls ``os.abort()``, which an
Inductor post-grad pass inserts into the compiled program only (eager and the exported
program never call it). The inner sessions run in subprocesses: were the screen broken,
the abort would end them, not this suite.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pytest_aoti.checks.crash_screen import crash_finding, inputs_digest, signal_name
from pytest_aoti.errors import AotiCheckError
from pytest_aoti.findings import REPRODUCIBLE_KINDS, FindingKind
from pytest_aoti.triage.repro import reproduces

ABORTING_ENGINE = '''
import os

import pytest
import torch
from torch._inductor.custom_graph_pass import CustomGraphPass


@torch.library.custom_op("pytest_aoti_faults::abort", mutates_args=())
def abort(x: torch.Tensor) -> torch.Tensor:
    if x.shape[0] > 2:  # a generated shape's check has 2 rows: only larger shapes abort
        os.abort()
    return x.clone()


@abort.register_fake
def _(x):
    return torch.empty_like(x)


class CallsAbort(CustomGraphPass):
    """Routes the program's first output through the aborting op: only the engine calls it."""

    def __call__(self, graph):
        output = next(node for node in graph.nodes if node.op == "output")
        first, *rest = output.args[0]
        with graph.inserting_before(output):
            call = graph.call_function(torch.ops.pytest_aoti_faults.abort.default, (first,))
        output.args = ((call, *rest),)

    def uuid(self):
        return "pytest-aoti-calls-abort-1"


class Affine(torch.nn.Module):
    def forward(self, x):
        return x * 2 + 1


FILL = float(os.environ.get("FILL", "1"))


def test_before():
    assert True


def test_crashes(aoti):
    aoti.check(
        Affine(),
        (torch.full((4, 3), FILL),),
        inductor_configs={"post_grad_custom_post_pass": CallsAbort()},
    )


def test_crashes_on_a_generated_shape(aoti):
    aoti.check(
        Affine(),
        (torch.full((2, 3), FILL),),
        dynamic_shapes={"x": {0: torch.export.Dim("rows", max=16)}},
        inductor_configs={"post_grad_custom_post_pass": CallsAbort()},
        examples=4,
    )


def test_after(aoti):
    aoti.check(Affine(), (torch.full((4, 3), FILL),))
'''

SERVED_WHEN_ASKED = """
import os

import pytest_aoti.checks.base

if os.environ.get("SERVED"):  # these programs are small: make the child their engine's home
    pytest_aoti.checks.base.SERVED_FROM_BYTES = 0
"""


def _run(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    cache: Path,
    *args: str,
    fill: str,
    served: bool = False,
) -> pytest.RunResult:
    pytester.makepyfile(test_aborting=ABORTING_ENGINE)
    pytester.makeconftest(SERVED_WHEN_ASKED)
    monkeypatch.setenv("FILL", fill)
    monkeypatch.setenv("SERVED", "1" if served else "")
    return pytester.runpytest_subprocess(
        "--aoti-device=cpu",
        f"--aoti-cache-dir={cache}",
        f"--aoti-report={pytester.path / 'report.json'}",
        f"--aoti-keep-failed={pytester.path / 'bundles'}",
        "-p",
        "no:randomly",
        *args,
    )


def _records(pytester: pytest.Pytester) -> dict[str, dict]:
    """The JSON report's check records by test name."""
    report = json.loads((pytester.path / "report.json").read_text())
    return {record["test"].split("::")[-1]: record for record in report["checks"]}


@pytest.mark.compiles
def test_an_aborting_engine_fails_its_test_and_the_run_goes_on(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    crash_line = (
        "*the AOTI compile broke it: the AOTI engine crashed its process (SIGABRT) "
        "on the example inputs*"
    )
    plain = _run(pytester, monkeypatch, cache, fill="1")
    plain.assert_outcomes(passed=2, failed=2)
    assert plain.ret == 1
    plain.stdout.fnmatch_lines(
        [crash_line, "*crash_screen=False*", "*repro bundle: *exits 134 (SIGABRT)*"]
    )
    plain.stdout.no_fnmatch_line("*Fatal Python error*")
    plain.stdout.fnmatch_lines(
        [
            "*AotiCheckError: boundary shape fails: x=(*",
            "*first difference: the AOTI compile broke it: the AOTI engine crashed its "
            "process (SIGABRT) on the inputs of generated x=(*",
            "*repro bundle: *test_crashes_on_a_generated_shape*exits 134 (SIGABRT)*",
        ]
    )
    records = _records(pytester)
    assert records["test_crashes[cpu]"]["finding"]["kind"] == "crash"
    assert records["test_crashes[cpu]"]["finding"]["location"] == "SIGABRT"
    assert records["test_after[cpu]"]["crash_screen"] == "screened"
    bundles = {path.parent.name: path for path in (pytester.path / "bundles").glob("*/repro.py")}
    assert len(bundles) == 2, f"the example's crash and the generated shape's: {bundles}"
    # the generated shape's bundle replays its drawn inputs in a fresh Python (the example's
    # takes the same path with the example's inputs)
    (generated,) = (path for name, path in bundles.items() if "generated_shape" in name)
    replay = subprocess.run(
        [sys.executable, str(generated)], capture_output=True, text=True, timeout=300
    )
    assert replay.returncode == 128 + signal.SIGABRT, replay.stdout + replay.stderr
    assert "REPRODUCED: the AOTI engine crashed its process (SIGABRT)" in replay.stdout

    # other values: the same programs (no compile), screened again, by xdist's workers
    pytest.importorskip("xdist")
    distributed = _run(pytester, monkeypatch, cache, "-n", "2", fill="2")
    distributed.assert_outcomes(passed=2, failed=2)
    distributed.stdout.fnmatch_lines([crash_line])
    records = _records(pytester)
    assert records["test_crashes[cpu]"]["finding"]["kind"] == "crash"
    assert records["test_after[cpu]"]["crash_screen"] == "screened"

    # the same values again: kept verdicts, no child for the passing programs
    warm = _run(pytester, monkeypatch, cache, fill="2")
    warm.assert_outcomes(passed=2, failed=2)
    warm.stdout.fnmatch_lines([crash_line])
    after = _records(pytester)["test_after[cpu]"]
    assert after["crash_screen"] == "cached" and after["engine_calls"] is None
    assert not (cache / "served-tests").exists(), "no test was served: none starts the child early"

    # a program served by the child (a large one's way): the child makes the check's calls on
    # every run and the check takes its outputs; no engine is loaded in the test process
    served = _run(pytester, monkeypatch, cache, fill="2", served=True)
    served.assert_outcomes(passed=2, failed=2)
    served.stdout.fnmatch_lines([crash_line])
    after = _records(pytester)["test_after[cpu]"]
    assert after["crash_screen"] == "screened"
    assert after["engine_calls"]["served"] >= 1 and after["engine_calls"]["made_here"] == 0
    # the served test's next run starts the child at its setup
    assert len(list((cache / "served-tests").iterdir())) == 1


def test_an_ordinary_error_in_the_child_is_no_crash() -> None:
    verdict = {"verdict": "crash", "signal": signal.SIGSEGV.value, "why": "x"}
    finding = crash_finding(verdict, "sample 1", calls=2)
    assert finding.headline() == (
        "the AOTI compile broke it: the AOTI engine crashed its process (SIGSEGV) "
        "on the inputs of sample 1"
    )
    assert finding.kind == "crash" and FindingKind.CRASH in REPRODUCIBLE_KINDS
    assert reproduces(finding.to_json()) == {"kind": "crash", "location": "SIGSEGV"}
    hang = crash_finding({"verdict": "hang", "why": "late"}, "the example inputs", calls=1)
    assert hang.location == "hang" and reproduces(hang.to_json()) is None
    assert "did not return within" in hang.headline()
    assert signal_name(6) == "SIGABRT" and signal_name(None) == "no signal"


def test_the_verdict_key_follows_values_and_layout() -> None:
    x = torch.ones(4, 3)
    same = inputs_digest(((x.clone(),), {}))
    assert inputs_digest(((x,), {})) == same
    assert inputs_digest(((x * 2,), {})) != same
    assert inputs_digest(((x.t().contiguous().t(),), {})) != same
    assert inputs_digest(((x, 3), {})) != inputs_digest(((x, 4), {}))


def test_where_the_child_cannot_run_the_calls_the_record_says_unprotected() -> None:
    from types import SimpleNamespace

    from pytest_aoti.checks.crash_screen import CrashScreen

    program = SimpleNamespace(device=torch.device("meta"), key="k")
    screen = CrashScreen(program, torch.nn.Identity(), calls=1)  # type: ignore[arg-type]
    screen.screen(((torch.ones(2),), {}), "the example inputs")  # no child, no raise
    record = screen.record()
    assert record.fields == {"crash_screen": "unprotected"}
    assert record.notes == (
        "engine calls ran unprotected: the engine child does not run meta engines",
    )


def test_the_module_that_registered_an_op_through_a_library_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    from pytest_aoti.compiling.custom_ops import _registering_module

    (tmp_path / "registers_ops.py").write_text(
        "import torch\n"
        'LIBRARY = torch.library.Library("pytest_aoti_library_faults", "DEF")\n'
        'LIBRARY.define("double(Tensor x) -> Tensor")\n'
        'LIBRARY.impl("double", lambda x: x * 2, "CompositeExplicitAutograd")\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("registers_ops")
    try:
        assert _registering_module("pytest_aoti_library_faults::double") is module
        assert _registering_module("pytest_aoti_library_faults::absent") is None
    finally:
        module.LIBRARY._destroy()
        sys.modules.pop("registers_ops", None)


class _Attachments:
    """Sidecars kept in memory, each write counted."""

    def __init__(self) -> None:
        self.data: dict[tuple[str, str], dict[str, object]] = {}
        self.writes = 0

    def attached(self, key: str, name: str) -> dict[str, object] | None:
        return self.data.get((key, name))

    def attach(self, key: str, name: str, data: dict[str, object]) -> None:
        self.writes += 1
        self.data[(key, name)] = dict(data)


class _Double(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def _screen_of_double(monkeypatch: pytest.MonkeyPatch, requests: list[dict[str, object]]):
    """A screen of ``_Double``'s program whose child answers every job (each call doubles
    its input) and records each request."""
    from types import SimpleNamespace

    from pytest_aoti.checks import crash_screen
    from pytest_aoti.checks.crash_screen import CrashScreen

    class PendingJobs:
        """The child's answer to one request: every call doubles its input."""

        def __init__(self, request, jobs, timeout, path=(), late=""):  # type: ignore[no-untyped-def]
            requests.append(request)
            self.request, self.jobs = request, jobs

        def results(self):  # type: ignore[no-untyped-def]
            return answers(self.request, self.jobs)

    def answers(request, jobs):  # type: ignore[no-untyped-def]
        return {
            job: {
                "calls": [
                    {
                        "outputs": request["inputs"][job[0]][0] * 2,
                        "aliases": [-1],
                        "inputs": request["inputs"][job[0]],
                        "seconds": 0.0,
                    }
                ]
            }
            if request["keep_calls"]
            else {}
            for job in jobs
        }

    monkeypatch.setattr(crash_screen, "PendingJobs", PendingJobs)
    exported = torch.export.export(_Double(), (torch.ones(3),))
    program = SimpleNamespace(
        device=torch.device("cpu"),
        key="k",
        exported=exported,
        mutated_buffers=frozenset(),
        package_path=Path("package.pt2"),
    )
    attachments = _Attachments()
    screen = CrashScreen(program, _Double(), calls=1, attachments=attachments)  # type: ignore[arg-type]
    ready = SimpleNamespace(unfound=(), path=(), request=dict)
    monkeypatch.setattr(screen, "_prepared", lambda: ready)
    return screen, attachments


def test_the_verdicts_of_one_request_are_kept_in_one_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    requests: list[dict[str, object]] = []
    screen, attachments = _screen_of_double(monkeypatch, requests)
    sets = [((torch.full((3,), float(i)),), {}) for i in range(5)]
    screen.screen_all(sets, [f"draw {i}" for i in range(5)])
    assert len(requests) == 1 and attachments.writes == 1  # not one rewrite per input set
    assert len(attachments.data[("k", "crash_screen")]) == 5
    screen.screen_all(sets, [f"draw {i}" for i in range(5)])  # every verdict kept: no child
    assert len(requests) == 1 and attachments.writes == 1 and screen.cached == 5


def test_a_search_takes_the_childs_calls_and_keeps_no_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    requests: list[dict[str, object]] = []
    screen, attachments = _screen_of_double(monkeypatch, requests)
    loads: list[int] = []

    class Here:
        def __call__(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    def load() -> Here:
        loads.append(1)
        return Here()

    sets = [((torch.full((3,), float(i)),), {}) for i in range(4)]
    engines = [screen.search_engine(load, input_set) for input_set in sets]
    screen.screen_all(sets, [f"draw {i}" for i in range(4)], serve=True)
    assert len(requests) == 1 and requests[0]["keep_calls"] is True
    assert attachments.writes == 0  # each draw runs once: its verdict is kept by no one
    for i, engine in enumerate(engines):
        out = engine()(torch.full((3,), float(i)))
        assert torch.equal(out, torch.full((3,), 2.0 * i))
    assert not loads  # every draw's call was the child's: no engine called here
    # inputs other than the child's (a bit apart), or a second call: the check's engine
    assert torch.equal(engines[1]()(torch.full((3,), 1.5)), torch.full((3,), 3.0))
    other = screen.search_engine(load, ((torch.full((3,), 9.0),), {}))
    assert torch.equal(other()(torch.full((3,), 9.0)), torch.full((3,), 18.0))
    assert loads == [1, 1]


def test_a_started_screen_runs_beside_this_process_and_ignores_the_sets_dropped_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The request goes out at start, its answer is read at finish; a crash of a set the
    check dropped in between (eager refused it) is no finding, any other crash is."""
    from pytest_aoti.checks import crash_screen

    requests: list[dict[str, object]] = []
    screen, _ = _screen_of_double(monkeypatch, requests)
    answered: list[int] = []
    doubling = crash_screen.PendingJobs

    class CrashingOnTheSecond(doubling):  # type: ignore[misc, valid-type]
        def results(self):  # type: ignore[no-untyped-def]
            answered.append(len(requests))
            results = super().results()
            results[(1, False)] = {"crashed": "the engine crashed the process (signal 11)"}
            return results

    monkeypatch.setattr(crash_screen, "PendingJobs", CrashingOnTheSecond)
    sets = [((torch.full((3,), float(i)),), {}) for i in range(3)]
    labels = [f"draw {i}" for i in range(3)]
    started = screen.start_all(sets, labels, serve=True)
    assert len(requests) == 1 and not answered, "sent at the start, not yet waited for"
    started.finish(ignore=[1])
    assert answered == [1]
    with pytest.raises(AotiCheckError, match="draw 1"):
        screen.start_all(sets, labels, serve=True).finish()
