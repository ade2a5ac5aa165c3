"""Fixtures of the benchmark suite: model import path, warm-up, and timing records.

Environment variables (set by ``benchmarks/bench_cache.py``; all optional, so the suite
also runs as a plain example with ``pytest benchmarks/suite``):

- ``AOTI_BENCH_MODELS``: comma list of model names to check (default: every suite model);
- ``AOTI_BENCH_WARMUP=1``: compile a throwaway model with raw torch calls before the first
  test, as the raw measurement does, so both sides start from the same process state;
- ``AOTI_BENCH_TIMINGS``: a file that gets one JSON line per timed check (and warm-up).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# benchmarks/models.py is shared with the raw-torch worker; it is a script directory, not a package
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import models  # noqa: E402

WARMUP_ENV = "AOTI_BENCH_WARMUP"
TIMINGS_ENV = "AOTI_BENCH_TIMINGS"


def _append_record(record: dict[str, Any]) -> None:
    """One JSON line per record; a single O_APPEND write, so xdist workers never interleave."""
    path = os.environ.get(TIMINGS_ENV)
    if not path:
        return
    line = (json.dumps(record) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _worker(config: pytest.Config) -> str:
    workerinput = getattr(config, "workerinput", None)
    return str(workerinput["workerid"]) if workerinput else "main"


@pytest.fixture(scope="session", autouse=True)
def _bench_warm_up(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> None:
    if os.environ.get(WARMUP_ENV) != "1":
        return
    started = time.perf_counter()
    steps = models.warm_up(tmp_path_factory.mktemp("warm_up"))
    _append_record(
        {
            "kind": "warm_up",
            "worker": _worker(request.config),
            "seconds": time.perf_counter() - started,
            "steps": steps,
        }
    )


@pytest.fixture
def record_check(request: pytest.FixtureRequest) -> Callable[[str, float, float, Any], None]:
    """``record_check(model, seconds, cpu_seconds, result)``: write one check's record."""

    def record(model: str, seconds: float, cpu_seconds: float, result: Any) -> None:
        _append_record(
            {
                "kind": "check",
                "model": model,
                "worker": _worker(request.config),
                "seconds": seconds,
                "cpu_seconds": cpu_seconds,
                "cache_hit": bool(result.program.cache_hit),
                "compile_seconds": float(result.program.compile_seconds),
            }
        )

    return record


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Record this process's CPU time (each xdist worker and the controller separately).

    ``own_cpu_seconds`` leaves children out: an xdist controller's children are its workers.
    """
    _append_record(
        {
            "kind": "process",
            "worker": _worker(session.config),
            "cpu_seconds": models.cpu_seconds(),
            "own_cpu_seconds": models.cpu_seconds(children=False),
        }
    )
