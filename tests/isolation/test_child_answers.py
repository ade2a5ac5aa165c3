"""The engine child answers job by job through its pipe: the jobs done before it died keep
their results, the job whose result was cut short is the crash, a fresh child runs the rest."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch

from pytest_aoti.isolation import process

_DYING_CHILD = """
import io, json, os, signal, sys
import torch

answers = os.fdopen(os.dup(1), "wb")
requests = sys.stdin.buffer
while line := requests.readline():
    asked = json.loads(line)
    request = torch.load(io.BytesIO(requests.read(asked["request_bytes"])), weights_only=False)
    for position, (index, checked) in enumerate(request["jobs"]):
        saved = io.BytesIO()
        torch.save({"echo": request["inputs"][index], "pid": os.getpid()}, saved)
        payload = saved.getvalue()
        answers.write(json.dumps({"job": position, "bytes": len(payload)}).encode() + b"\\n")
        if index == 2:  # ends halfway through its result
            answers.write(payload[: len(payload) // 2])
            answers.flush()
            os.kill(os.getpid(), signal.SIGSEGV)
        answers.write(payload)
        answers.flush()
    answers.write(b'{"done": true, "rss": 1}\\n')
    answers.flush()
"""


def test_a_child_that_dies_in_a_result_keeps_the_results_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    child = tmp_path / "child.py"
    child.write_text(_DYING_CHILD)
    monkeypatch.setattr(process, "_CHILD", child)
    monkeypatch.setattr(process, "_PROCESS", None)
    inputs = [torch.full((300_000,), float(index)) for index in range(4)]  # more than a pipe holds
    jobs = [(index, False) for index in range(4)]
    try:
        results = process.PendingJobs({"inputs": inputs}, jobs, timeout=60).results()
        assert process.engine_child().starts == 2, "a fresh child after the crash"
    finally:
        process.shutdown()
    for index in (0, 1, 3):
        assert torch.equal(results[(index, False)]["echo"], inputs[index])
    segv = signal.SIGSEGV.value
    assert results[(2, False)] == {
        "crashed": f"the engine crashed the process (signal {segv})",
        "signal": segv,
    }
    pids = [results[(index, False)]["pid"] for index in (0, 1, 3)]
    assert pids[0] == pids[1] != pids[2], "the job after the crash ran in a fresh child"
