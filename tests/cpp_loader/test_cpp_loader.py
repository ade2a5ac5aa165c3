"""The C++ loader check in pytest sessions: a correct program's package, loaded by
``AOTIModelPackageLoader`` in the runner, gives the Python engine's outputs bit for bit (and
its inputs after the call); a fault of the suite's own (the runner fed another input, through
the check's test hook) fails naming the loader and the output; a machine without a compiler
skips the check with one header line.

The runner is built once per test session, in the shared cache folder."""

from __future__ import annotations

import json
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_aoti.cpp_loader.check import PERTURB_ENV

CORRECT = """
def test_mutated_input(aoti):
    aoti.check(DoubleThenCos(), (example(),))


def test_buffer_state(aoti):
    torch.manual_seed(0)
    aoti.check(RunningMean(), (torch.randn(4, 2),))


def test_off(aoti):
    result = aoti.check(DoubleThenCos(), (example(),), cpp_loader=False)
    assert "cpp_loader" not in result.checks


def test_served(aoti, monkeypatch):
    # a large package's way: the engine child's outputs are the Python engine's
    monkeypatch.setattr("pytest_aoti.checks.base.SERVED_FROM_BYTES", 0)
    aoti.check(DoubleThenCos(), (example(),))
"""

HEADER = "aoti: C++ loader (AOTIModelPackageLoader) check skipped on this machine: "


def records(report: Path) -> dict[str, dict[str, object]]:
    checks = json.loads(report.read_text())["checks"]
    return {record["test"].split("::")[-1]: record for record in checks}


def properties(junit: Path) -> dict[str, dict[str, str]]:
    found = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        found[str(case.get("name"))] = {
            str(p.get("name")): str(p.get("value")) for p in case.iter("property")
        }
    return found


@pytest.mark.compiles
def test_a_correct_program_gives_the_python_engine_s_outputs_through_the_cpp_loader(
    run_aoti: Callable[..., pytest.RunResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PERTURB_ENV, raising=False)
    report, junit = tmp_path / "aoti.json", tmp_path / "junit.xml"
    result = run_aoti(CORRECT, f"--aoti-report={report}", f"--junitxml={junit}")
    result.assert_outcomes(passed=4)
    assert not [line for line in result.stdout.lines if line.startswith(HEADER)]
    result.stdout.fnmatch_lines(
        [
            "aoti: C++ loader (AOTIModelPackageLoader): 3 check(s) ran their package without "
            "Python, 2 bit for bit against the Python engine (*)"
        ]
    )
    found = records(report)
    for name in ("test_mutated_input[cpu]", "test_buffer_state[cpu]"):
        part = found[name]["cpp_loader"]
        assert isinstance(part, dict)
        assert part["ran"] and part["exact"] and part["input_sets"] == 1, part
        assert part["max_abs_vs_engine"] == 0.0 and part["max_abs_vs_eager"] < 1e-5, part
        assert part["load_seconds"] > 0 and part["call_seconds"] > 0, part
        if part["build_seconds"] is not None:  # built from the test's setup, beside the compile
            assert part["build_wait_seconds"] < part["build_seconds"], part
    assert found["test_buffer_state[cpu]"]["cpp_loader"]["runners"] == 1  # type: ignore[index]
    assert found["test_mutated_input[cpu]"]["cpp_loader"]["runners"] == 2  # type: ignore[index]
    assert found["test_off[cpu]"]["cpp_loader"] is None
    served = found["test_served[cpu]"]
    assert served["engine_calls"]["made_here"] == 0, "no engine loaded in the test process"
    part = served["cpp_loader"]
    assert isinstance(part, dict) and part["ran"] and not part["exact"], part
    assert part["max_abs_vs_engine"] == 0.0, part
    junit_properties = properties(junit)["test_mutated_input[cpu]"]
    assert junit_properties["aoti_cpp_loader"] == "passed"
    assert junit_properties["aoti_cpp_loader_max_abs_vs_engine"] == "0.0"

    # the runner is kept: a second session starts it and builds nothing
    again = run_aoti(CORRECT, f"--aoti-report={report}", "-p", "no:aoti-values")
    again.assert_outcomes(passed=4)
    part = records(report)["test_mutated_input[cpu]"]["cpp_loader"]
    assert isinstance(part, dict) and part["build_seconds"] is None and part["exact"]


WRONG_INPUT = """
def test_fed_another_input(aoti):
    aoti.check(DoubleThenCos(), (example(),))
"""


@pytest.mark.compiles
def test_a_runner_fed_another_input_fails_naming_the_loader_and_the_output(
    run_aoti: Callable[..., pytest.RunResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PERTURB_ENV, "1")
    report = tmp_path / "aoti.json"
    result = run_aoti(WRONG_INPUT, f"--aoti-report={report}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E * the C++ loader (AOTIModelPackageLoader): output differs from the Python "
            "engine's on the example: 1 of 6 elements differ",
            "E * must agree with the Python engine bit for bit (the runner has this process's "
            "* thread(s), denormals kept and float32 matmul precision highest)",
            "E *worst at index (0, 0): Python engine=* C++ loader=*",
            "E *cpp_loader=False (or --aoti-cpp-loader=off) leaves this check out",
        ]
    )
    finding = records(report)["test_fed_another_input[cpu]"]["finding"]
    assert isinstance(finding, dict)
    assert finding["kind"] == "check" and finding["location"] == "output"
    assert finding["message"].startswith("the C++ loader (AOTIModelPackageLoader): output")
    assert finding["figures"]["mismatched"] == 1


NO_COMPILER = """
def test_checked(aoti):
    aoti.check(DoubleThenCos(), (example(),))
"""


@pytest.mark.compiles
def test_a_machine_without_a_compiler_skips_the_check_with_one_header_line(
    run_aoti: Callable[..., pytest.RunResult],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The program comes from the shared cache (compiled by the tests above, or here once)."""
    monkeypatch.delenv(PERTURB_ENV, raising=False)
    missing = tmp_path / "no-such-c++"
    monkeypatch.setenv("CXX", str(missing))
    report = tmp_path / "aoti.json"
    result = run_aoti(NO_COMPILER, f"--aoti-report={report}")
    result.assert_outcomes(passed=1)
    reason = f"no C++ compiler: CXX={missing} is not found"
    assert [line for line in result.stdout.lines if line.startswith(HEADER)] == [HEADER + reason]
    result.stdout.fnmatch_lines(
        [f"aoti: C++ loader (AOTIModelPackageLoader) check skipped in 1 check(s): {reason}"]
    )
    part = records(report)["test_checked[cpu]"]["cpp_loader"]
    assert part == {"ran": False, "skipped": reason, "machine": True}


def test_the_header_line_needs_no_compile_and_goes_with_the_check(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytester.makepyfile(test_plain="def test_nothing():\n    pass\n")
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    line = f"{HEADER}no C++ compiler: CXX={tmp_path / 'no-such-c++'} is not found"
    result = pytester.runpytest("--aoti-device=cpu")
    assert [found for found in result.stdout.lines if found.startswith(HEADER)] == [line]
    for off in (["--aoti-cpp-loader=off"], ["-p", "no:aoti-cpp-loader"]):
        quiet = pytester.runpytest("--aoti-device=cpu", *off)
        assert not [found for found in quiet.stdout.lines if found.startswith(HEADER)], off
    monkeypatch.delenv("CXX")
    monkeypatch.setenv("PATH", str(tmp_path))  # neither c++ nor g++ to be found
    result = pytester.runpytest("--aoti-device=cpu")
    assert [found for found in result.stdout.lines if found.startswith(HEADER)] == [
        f"{HEADER}no C++ compiler: neither c++ nor g++ is on PATH (CXX names another)"
    ]


NESTED = """
def test_nested(aoti):
    aoti.check(Nested(), (example(), example() * 2))
"""


@pytest.mark.compiles
def test_nested_outputs_with_none_an_int_and_nan_pass(
    run_aoti: Callable[..., pytest.RunResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A None output is None on both sides (an undefined tensor in C++), NaN equals NaN."""
    monkeypatch.delenv(PERTURB_ENV, raising=False)
    report = tmp_path / "aoti.json"
    result = run_aoti(NESTED, f"--aoti-report={report}")
    result.assert_outcomes(passed=1)
    part = records(report)["test_nested[cpu]"]["cpp_loader"]
    assert isinstance(part, dict) and part["ran"] and part["exact"], part
    assert part["max_abs_vs_engine"] == 0.0, part


BUILD_STARTED = """
import os
import time
from pathlib import Path

CALLS = Path(os.environ["CPP_LOADER_TEST_CALLS"])
RECORDS = Path(os.environ["CPP_LOADER_TEST_RECORDS"])


def wait_for(found, seconds):
    deadline = time.monotonic() + seconds
    while not found() and time.monotonic() < deadline:
        time.sleep(0.02)
    return found()


def test_plain():
    assert not wait_for(CALLS.exists, 0.5), "no build for a test without the aoti fixture"


def test_first(aoti):
    # no check yet: the build started at this test's setup (and ends with its record)
    if os.environ["CPP_LOADER_TEST_EXPECT"] == "1":
        assert wait_for(lambda: list(RECORDS.glob("*/build.json")), 60)
    else:
        assert not wait_for(CALLS.exists, 0.5)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="a shell script as the compiler")
def test_the_runner_s_build_starts_at_the_setup_of_the_first_aoti_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Before the test's first check (its export and compile): a failure is remembered as a
    build the check made is; a session without an AOTI test, or without the check, builds
    nothing."""
    calls = tmp_path / "calls"
    compiler = tmp_path / "failing-g++"
    compiler.write_text(
        '#!/bin/sh\nif [ "$1" = "--version" ]; then echo "g++ (failing) 1.0"; exit 0; fi\n'
        f"echo run >> {calls}\necho 'runner.cpp:3:1: error: no' >&2\nexit 1\n"
    )
    compiler.chmod(0o755)
    monkeypatch.setenv("CXX", str(compiler))
    monkeypatch.setenv("CPP_LOADER_TEST_CALLS", str(calls))
    pytester.makepyfile(test_build_started=BUILD_STARTED)
    cache = tmp_path / "cache"
    monkeypatch.setenv("CPP_LOADER_TEST_RECORDS", str(cache / "cpp-loader"))
    common = ("--aoti-device=cpu", f"--aoti-cache-dir={cache}", "-p", "no:randomly")
    monkeypatch.setenv("CPP_LOADER_TEST_EXPECT", "0")
    for off in (["--aoti-cpp-loader=off"], ["-p", "no:aoti-cpp-loader"], ["-k", "plain"]):
        pytester.runpytest(*common, *off).assert_outcomes(passed=2 if off[0] != "-k" else 1)
    pytester.makeconftest(
        "import pytest\n\n"
        "def pytest_collection_modifyitems(items):\n"
        "    for item in items:\n"
        "        item.add_marker(pytest.mark.aoti(cpp_loader=False))\n"
    )
    pytester.runpytest(*common).assert_outcomes(passed=2)
    assert not calls.exists()

    (pytester.path / "conftest.py").unlink()
    monkeypatch.setenv("CPP_LOADER_TEST_EXPECT", "1")
    pytester.runpytest(*common).assert_outcomes(passed=2)
    assert calls.read_text() == "run\n"
    reason = "the runner did not build against this torch: runner.cpp:3:1: error: no"
    [record] = (cache / "cpp-loader").glob("*/build.json")
    assert json.loads(record.read_text())["reason"] == reason
    again = pytester.runpytest(*common, "-k", "plain")
    assert [line for line in again.stdout.lines if line.startswith(HEADER)] == [
        f"{HEADER}{reason} (remembered in {cache / 'cpp-loader'}; remove it to build again)"
    ]
    assert calls.read_text() == "run\n", "not tried again"


@pytest.mark.skipif(sys.platform != "linux", reason="a shell script as the compiler")
def test_xdist_workers_start_the_build_and_one_of_them_builds(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls = tmp_path / "calls"
    compiler = tmp_path / "slow-g++"
    compiler.write_text(
        '#!/bin/sh\nif [ "$1" = "--version" ]; then echo "g++ (slow) 1.0"; exit 0; fi\n'
        f"echo run >> {calls}\nsleep 2\necho 'runner.cpp:4:1: error: no' >&2\nexit 1\n"
    )
    compiler.chmod(0o755)
    monkeypatch.setenv("CXX", str(compiler))
    cache = tmp_path / "cache"
    pytester.makepyfile(
        test_two_workers=f"""
        import time
        from pathlib import Path

        import pytest

        RECORDS = Path({str(cache / "cpp-loader")!r})


        @pytest.mark.parametrize("n", range(4))
        def test_waits_for_the_record(aoti, n):
            deadline = time.monotonic() + 60
            while not list(RECORDS.glob("*/build.json")) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)  # the other worker's background build reads the record
            assert list(RECORDS.glob("*/build.json"))
        """
    )
    result = pytester.runpytest_subprocess(
        "--aoti-device=cpu", f"--aoti-cache-dir={cache}", "-n", "2", timeout=180
    )
    result.assert_outcomes(passed=4)
    assert calls.read_text() == "run\n"


@pytest.mark.skipif(sys.platform != "linux", reason="a shell script as the compiler")
def test_a_session_that_ends_during_the_build_stops_it_and_keeps_nothing(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    compiler = tmp_path / "endless-g++"
    compiler.write_text(
        '#!/bin/sh\nif [ "$1" = "--version" ]; then echo "g++ (endless) 1.0"; exit 0; fi\n'
        'while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done\n'
        f'echo half > "$out"\ntouch {started}\nsleep 120\n'
    )
    compiler.chmod(0o755)
    monkeypatch.setenv("CXX", str(compiler))
    pytester.makepyfile(
        test_short=f"""
        import time
        from pathlib import Path


        def test_ends_first(aoti):
            deadline = time.monotonic() + 60
            while not Path({str(started)!r}).exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        """
    )
    cache = tmp_path / "cache"
    began = time.monotonic()
    pytester.runpytest("--aoti-device=cpu", f"--aoti-cache-dir={cache}").assert_outcomes(passed=1)
    assert started.exists()
    assert time.monotonic() - began < 60, "the session's end does not wait for the compiler"
    [folder] = [path for path in (cache / "cpp-loader").iterdir() if path.is_dir()]
    assert list(folder.iterdir()) == [], "no half-written runner, no record"
