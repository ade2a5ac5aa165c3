"""Ctrl-C during a compile: the run says "interrupted", ends the compiler processes it
started (its own descendants only), leaves no partial cache entry and still writes its
JSON report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pytest_aoti.compiling.compilers import COMPILER_NAMES, descendants
from pytest_aoti.compiling.machine import machine_target

MODEL = """
import torch


class Wide(torch.nn.Module):
    def forward(self, x):
        for _ in range(12):
            x = torch.sin(x) * 1.5 + torch.cos(x).sum(dim=-1, keepdim=True)
        return x


def test_compile(aoti):
    aoti.check(Wide(), (torch.randn(8, 32),))
"""


def _sigint_at_its_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.compiles
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigint_during_a_compile_ends_its_compilers_and_says_interrupted(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile(test_wide=MODEL)
    report = tmp_path / "report.json"
    # the host's compile target kept in the run's cache beforehand: its search builds test
    # programs with the compiler, and the signal must land in the AOTI compile itself (so
    # the C++ loader's runner, whose build starts at the test's setup, is left out)
    machine_target(tmp_path / "cache")
    with subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "--aoti-device=cpu",
            "--aoti-cpp-loader=off",
            f"--aoti-cache-dir={tmp_path / 'cache'}",
            f"--aoti-report={report}",
        ],
        cwd=pytester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # as a shell starts it: an earlier test in this worker process can leave SIGINT
        # ignored, and an ignored signal stays ignored across exec
        preexec_fn=_sigint_at_its_default,
    ) as process:
        text, compilers, code = _interrupt_its_compile(process)
    left = [f"{pid} {name}" for pid, name in compilers.items() if _alive(pid)]
    assert not left, f"compilers left running after pytest ended: {left}"
    assert code == pytest.ExitCode.INTERRUPTED, text
    assert "interrupted after" in text or "compiling" not in text, text
    assert "failed after" not in text, text
    assert json.loads(report.read_text())["interrupted"] is True
    entries = tmp_path / "cache" / "v1" / "entries"
    assert not entries.exists() or not any(entries.iterdir()), "no partial cache entry"


def _interrupt_its_compile(
    process: subprocess.Popen[str],
) -> tuple[str, dict[int, str], int]:
    """SIGINT to ``process`` once a compiler runs below it: its output, the compilers seen
    then, its exit status."""
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(process.stdout or ()), daemon=True)
    reader.start()
    compilers: dict[int, str] = {}
    deadline = time.monotonic() + 240
    while not compilers and process.poll() is None and time.monotonic() < deadline:
        found = descendants(process.pid)
        compilers = {pid: name for pid, name in found.items() if name in COMPILER_NAMES}
        time.sleep(0.05)
    assert compilers, "no compiler process was seen:\n" + "".join(output)
    os.kill(process.pid, signal.SIGINT)  # the pytest process alone, as a debugger or CI does
    code = process.wait(timeout=120)
    reader.join(timeout=10)
    return "".join(output), compilers, code


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_only_the_compilers_below_this_process_are_ended(tmp_path: Path) -> None:
    """A compiler a compile's driver left behind is ended; the driver's other children and
    processes outside this one's tree are not."""
    from pytest_aoti.compiling.compilers import end_compilers

    compiler = tmp_path / "cc1plus"
    compiler.symlink_to("/bin/sleep")  # its command name is the link's
    script = f"import subprocess, time; subprocess.Popen(['{compiler}', '30']); subprocess.Popen(['sleep', '30']); time.sleep(30)"
    outside = subprocess.Popen([str(compiler), "30"], start_new_session=True)
    with subprocess.Popen([sys.executable, "-c", script]) as driver:
        try:
            deadline = time.monotonic() + 30
            while len(descendants(driver.pid)) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            below = descendants(driver.pid)
            assert sorted(below.values()) == ["cc1plus", "sleep"], below
            ended = end_compilers(driver.pid)
            assert [below[pid] for pid in ended] == ["cc1plus"]
            time.sleep(0.2)
            assert {name for pid, name in below.items() if _alive(pid)} == {"sleep"}
            assert _alive(outside.pid), "a process outside the tree is never ended"
        finally:
            for pid in descendants(driver.pid):
                os.kill(pid, signal.SIGKILL)
            driver.kill()
            outside.kill()
            outside.wait()
