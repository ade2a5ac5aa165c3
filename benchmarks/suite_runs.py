"""One run of the benchmark suite in a fresh pytest process, timed from inside its tests.

Shared by the benchmarks that compare the suite with an option off and on
(``bench_crash_screen.py``, ``bench_values.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SUITE = Path(__file__).resolve().parent / "suite" / "test_bench_suite.py"


def check_seconds(cache: Path, timings: Path, *options: str) -> tuple[float, int]:
    """Seconds of every ``aoti.check`` of one suite run with ``options`` (on the CPU, with
    ``cache`` as its artifact cache), and how many checks ran."""
    timings.unlink(missing_ok=True)
    env = {**os.environ, "AOTI_BENCH_TIMINGS": str(timings), "AOTI_BENCH_WARMUP": "1"}
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(SUITE),
        "-q",
        "-p",
        "no:cacheprovider",
        "--aoti-device=cpu",
        f"--aoti-cache-dir={cache}",
        *options,
    ]
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    records = [json.loads(line) for line in timings.read_text().splitlines()]
    checks = [r for r in records if r.get("kind", "check") == "check"]
    return sum(float(r["seconds"]) for r in checks), len(checks)
