"""The runner's line protocol and the process that speaks it, with a stand-in runner (a short
script): requests written, answers read, a runner that hangs or dies is gone with the reason."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from pytest_aoti.cpp_loader.protocol import (
    Answer,
    ProtocolError,
    lib_request,
    parse_answer,
    run_request,
    set_request,
)
from pytest_aoti.cpp_loader.runner import LoaderProcess, RunnerGone, loader_process, shutdown


def test_requests_are_one_line_of_tab_separated_fields() -> None:
    assert set_request(4, False, "highest") == "set\t4\t0\thighest\n"
    assert set_request(1, True, "medium") == "set\t1\t1\tmedium\n"
    assert lib_request(Path("/x/libops.so")) == "lib\t/x/libops.so\n"
    assert run_request("/c/p.pt2", "/t/in.pt", "/t/out.pt", runners=2, fresh=False) == (
        "run\t/c/p.pt2\t/t/in.pt\t/t/out.pt\t2\t0\tcpu\n"
    )
    assert run_request("p", "i", "o", runners=1, fresh=True, device="cuda:0").endswith(
        "\t1\t1\tcuda:0\n"
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda: run_request("a\tb.pt2", "i", "o", runners=1, fresh=False),
        lambda: run_request("a.pt2", "i\n", "o", runners=1, fresh=False),
        lambda: run_request("a.pt2", "i", "o", runners=0, fresh=False),
        lambda: set_request(0, False, "highest"),
        lambda: lib_request("lib\rops.so"),
    ],
)
def test_a_request_that_cannot_be_one_line_is_refused(make: object) -> None:
    with pytest.raises(ProtocolError):
        make()  # type: ignore[operator]


def test_answers_are_ok_with_named_fields_or_an_error_with_its_stage() -> None:
    answer = parse_answer(b"ok\tload=0.25\tcall=0.001\tloaded=1\toutputs=2\n")
    assert answer == Answer(True, {"load": "0.25", "call": "0.001", "loaded": "1", "outputs": "2"})
    assert answer.number("load") == 0.25
    with pytest.raises(ProtocolError, match="no number calls="):
        answer.number("calls")
    assert parse_answer("ok\n") == Answer(True)
    error = parse_answer("error\tload\tPytorchStreamReader failed reading zip archive\n")
    assert error == Answer(
        False, stage="load", message="PytorchStreamReader failed reading zip archive"
    )
    for line in ("", "ready\n", "ok\tno-equals\n", "error\n", "Segmentation fault\n"):
        with pytest.raises(ProtocolError):
            parse_answer(line)


STAND_IN = """\
import sys, time
print("ready", flush=True)
for line in sys.stdin:
    fields = line.rstrip("\\n").split("\\t")
    if fields[0] == "set":
        print(f"ok\\tthreads={fields[1]}\\tdenormal=0\\tprecision={fields[3]}", flush=True)
    elif fields[0] == "hang":
        time.sleep(60)
    elif fields[0] == "die":
        print("terminate called after throwing an instance of 'c10::Error'", file=sys.stderr)
        sys.exit(3)
    else:
        print("error\\trequest\\tunknown request " + fields[0], flush=True)
"""


@pytest.fixture
def stand_in(tmp_path: Path) -> Path:
    """An executable that answers as the runner does."""
    path = tmp_path / "runner"
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(STAND_IN))
    path.chmod(0o755)
    return path


@pytest.mark.skipif(sys.platform == "win32", reason="a script as the runner")
def test_the_process_answers_line_by_line_and_is_set_once(stand_in: Path) -> None:
    process = LoaderProcess(stand_in)
    try:
        answer = process.configure(set_request(3, False, "highest"), 10)
        assert answer.ok and answer.fields["threads"] == "3"
        assert process.starts == 1
        started = process.take_start_seconds()
        assert started is not None and started > 0
        assert process.take_start_seconds() is None, "the start is paid once"
        # set the same way again: not asked again
        assert process.configure(set_request(3, False, "highest"), 10) is answer
        unknown = process.ask("what\n", 10)
        assert not unknown.ok and unknown.stage == "request"
        assert process.starts == 1
    finally:
        process.close()
    assert not process.running


@pytest.mark.skipif(sys.platform == "win32", reason="a script as the runner")
def test_a_runner_that_hangs_or_dies_is_gone_and_the_next_request_starts_another(
    stand_in: Path,
) -> None:
    process = LoaderProcess(stand_in)
    try:
        with pytest.raises(RunnerGone, match="did not answer within 1 s"):
            process.ask("hang\n", 1.0)
        assert not process.running
        with pytest.raises(RunnerGone) as gone:
            process.ask("die\n", 10)
        assert str(gone.value) == (
            "the C++ loader's runner exited (status 3): terminate called after throwing an "
            "instance of 'c10::Error'"
        )
        assert process.configure(set_request(1, False, "highest"), 10).ok
        assert process.starts == 3
    finally:
        process.close()


def test_a_runner_that_cannot_start_says_why(tmp_path: Path) -> None:
    process = LoaderProcess(tmp_path / "no-runner")
    with pytest.raises(RunnerGone, match="did not start"):
        process.ask("set\t1\t0\thighest\n", 1)


def test_one_runner_per_process_and_binary(stand_in: Path, tmp_path: Path) -> None:
    first = loader_process(stand_in)
    assert loader_process(stand_in) is first
    other = loader_process(tmp_path / "other")
    assert other is not first
    shutdown()
    assert loader_process(stand_in) is not first
    shutdown()


def test_the_sessions_end_does_not_wait_for_the_runner_to_exit(stand_in: Path) -> None:
    process = loader_process(stand_in)
    assert process.configure(set_request(1, False, "highest"), 10).ok
    running = process._child.process
    assert running is not None and running.poll() is None
    shutdown(wait=False)  # returns at once: a thread of its own waits for the exit
    assert running.wait(timeout=10) is not None, "the end of its input ends the runner"
    assert loader_process(stand_in) is not process
    shutdown()
