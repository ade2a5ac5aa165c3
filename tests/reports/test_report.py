"""Reports a CI user reads: the JSON report (merged across xdist workers), the durations
table, JUnit figures of failures, progress lines, profiler traces and the header."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from pytest_aoti.reports.collector import durations_table
from pytest_aoti.reports.header import torch_build
from pytest_aoti.reports.records import CheckRecord

REPORTED = """
def test_input_mutation(aoti):
    aoti.check(DoubleThenCos(), (example(),), mutates={"x": example() * 2})

def test_counter_first_call(aoti):
    aoti.check(Counter(), (example(),), calls=1)

def test_two_checks(aoti):
    aoti.check(DoubleThenCos(), (example(),))
    aoti.check(DoubleThenCos(), (example() + 1,))

def test_engine_off(aoti):
    aoti.check(OffWhenCompiled(), (example(),))
"""


def _report(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.compiles
def test_json_report_under_xdist_holds_one_record_per_check(run_aoti, tmp_path: Path) -> None:
    report = tmp_path / "aoti.json"
    result = run_aoti(
        REPORTED,
        "-n",
        "2",
        f"--aoti-report={report}",
        "--aoti-localize=off",
        "-W",
        "ignore::pytest_aoti.AotiBufferMutationWarning",
    )
    result.assert_outcomes(passed=3, failed=1)
    document = _report(report)
    assert document["version"] == 2  # bumped once for stage, compiles, check_index, fp64_rescued
    assert document["torch"] and document["build"] == torch_build()
    assert document["devices"] == ["cpu"]
    checks = document["checks"]
    tests = sorted(check["test"].split("::")[1] for check in checks)
    assert tests == [
        "test_counter_first_call[cpu]",
        "test_engine_off[cpu]",
        "test_input_mutation[cpu]",
        "test_two_checks[cpu]",
        "test_two_checks[cpu]",
    ]
    assert {check["worker"] for check in checks} == {"gw0", "gw1"}
    for check in checks:
        assert set(check) >= {
            "test",
            "device",
            "program",
            "cache_hit",
            "compile_seconds",
            "max_abs",
            "max_rel",
            "outcome",
            "shapes_tried",
            "engine_seconds",
            "eager_seconds",
        }
    failed = [check for check in checks if check["outcome"] == "failed"]
    assert len(failed) == 1
    assert failed[0]["finding"]["stage"] == "export"
    assert failed[0]["finding"]["figures"]["mismatched"] == 1
    passed = [check for check in checks if check["outcome"] == "passed"]
    assert all(check["engine_seconds"] > 0 and check["eager_seconds"] > 0 for check in passed)
    result.stdout.fnmatch_lines(["*aoti: slowest 5 AOTI checks*", "seconds  compile*"])


@pytest.mark.compiles
def test_cache_hit_reports_no_compile_time_in_this_run(
    run_aoti, pytester: pytest.Pytester, tmp_path: Path
) -> None:
    source = """
        def test_once(aoti):
            aoti.check(DoubleThenCos(), (example(),))
        """
    run_aoti(source).assert_outcomes(passed=1)  # fills the shared cache if it was empty
    report = tmp_path / "warm.json"
    result = run_aoti(source, f"--aoti-report={report}", "--junitxml=warm.xml")
    result.assert_outcomes(passed=1)
    (check,) = _report(report)["checks"]
    assert check["cache_hit"] is True
    assert check["compile_seconds"] == 0
    assert check["original_compile_seconds"] > 0
    result.stdout.fnmatch_lines(["*cached*test_once*"])
    xml = (pytester.path / "warm.xml").read_text()
    assert 'name="aoti_compile_seconds" value="0.0"' in xml


@pytest.mark.compiles
def test_failed_check_figures_reach_junit(run_aoti, pytester: pytest.Pytester) -> None:
    result = run_aoti(
        """
        def test_off(aoti):
            aoti.check(OffWhenCompiled(), (example(),))
        """,
        "--junitxml=failed.xml",
    )
    result.assert_outcomes(failed=1)
    xml = (pytester.path / "failed.xml").read_text()
    for expected in (
        'name="aoti_outcome" value="failed"',
        'name="aoti_failure_stage" value="export"',
        'name="aoti_failure_mismatched" value="1"',
        'name="aoti_failure_max_abs" value="0.5"',
    ):
        assert expected in xml, expected


@pytest.mark.compiles
def test_progress_lines_and_profile_traces(
    run_aoti, pytester: pytest.Pytester, tmp_path: Path
) -> None:
    traces = tmp_path / "traces"
    result = run_aoti(
        """
        class Fresh(torch.nn.Module):
            def forward(self, x):
                return (x * 7).tanh() + 1

        def test_fresh(aoti):
            aoti.check(Fresh(), (example(),))

        def test_again(aoti):
            aoti.check(Fresh(), (example() * 2,))
        """,
        "--aoti-cache=off",  # a real compile, longer than the progress threshold
        f"--aoti-profile={traces}",
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "aoti: compiling test_inner.py::test_fresh[[]cpu[]] (program *, cpu) ...",
            "aoti: compiled test_inner.py::test_fresh[[]cpu[]] (program *, cpu) in * s",
        ]
    )
    files = sorted(path.name for path in traces.iterdir())
    assert files == ["test_inner.py__test_again-cpu-.json", "test_inner.py__test_fresh-cpu-.json"]
    for name in files:
        trace = json.loads((traces / name).read_text())
        names = {event.get("name") for event in trace["traceEvents"]}
        assert "aoti_engine_call" in names


def test_header_names_torch_build_and_compiler(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--aoti-device=cpu")
    result.stdout.fnmatch_lines(
        ["aoti: device=cpu, cache=*", f"aoti: torch * ({torch_build()} build), C++ compiler: *"]
    )


def test_header_resolves_devices_when_aoti_tests_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(aoti_device): pass")
    result = pytester.runpytest("--aoti-device=auto")
    result.stdout.fnmatch_lines(["aoti: running on cpu"])


@pytest.mark.parametrize("option", ["--aoti-report", "--aoti-profile"])
def test_unwritable_report_paths_are_usage_errors(pytester: pytest.Pytester, option: str) -> None:
    pytester.makepyfile("def test_x(): pass")
    blocker = pytester.path / "a-file"
    blocker.write_text("")
    result = pytester.runpytest(f"{option}={blocker / 'sub' / 'out.json'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    # the path as given, and the file in the way of its directory
    result.stderr.fnmatch_lines(
        [f"*{option}=*a-file/sub/out.json: */a-file is a file, not a directory*"]
    )


def test_durations_table_orders_by_time_and_marks_cache_use() -> None:
    def record(test: str, seconds: float, **fields) -> CheckRecord:
        base = dict(
            device="cpu",
            program="k",
            cache_hit=False,
            compile_seconds=0.0,
            original_compile_seconds=1.0,
            check_seconds=seconds,
        )
        return CheckRecord(test=test, **{**base, **fields})

    rows = durations_table(
        [
            record("fast", 0.1, cache_hit=True),
            record("slow", 9.0, compile_seconds=8.5, engine_seconds=1.0, eager_seconds=4.0),
            record("shared", 0.5),
        ],
        limit=2,
    )
    assert len(rows) == 3
    assert rows[1].split() == ["9.00", "8.5", "0", "-", "0.25", "passed", "slow", "(cpu)"]
    assert rows[2].split()[1] == "shared"
    assert len(durations_table([record(str(i), i) for i in range(8)], limit=0)) == 9


@pytest.mark.compiles
def test_interrupted_session_writes_what_it_has(
    pytester: pytest.Pytester, shared_cache_dir: Path, tmp_path: Path
) -> None:
    from conftest import MODELS

    report = tmp_path / "interrupted.json"
    pytester.makepyfile(
        test_inner=MODELS
        + textwrap.dedent(
            """
            def test_a(aoti):
                aoti.check(DoubleThenCos(), (example(),))

            def test_b():
                raise KeyboardInterrupt  # what Ctrl-C raises
            """
        )
    )
    # a subprocess: an in-process run would hand the KeyboardInterrupt to this session
    result = pytester.runpytest_subprocess(
        "--aoti-device=cpu", f"--aoti-cache-dir={shared_cache_dir}", f"--aoti-report={report}"
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    document = _report(report)
    assert document["interrupted"] is True
    assert [check["test"] for check in document["checks"]] == ["test_inner.py::test_a[cpu]"]
