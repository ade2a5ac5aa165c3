"""Benchmark: what the crash screen costs a check, cold and warm.

    python benchmarks/bench_crash_screen.py [--json PATH]

Runs the benchmark suite (``suite/test_bench_suite.py``: one ``aoti.check`` per model of
:data:`models.MAIN`) four times, each in its own fresh pytest process, one after the
other: cold (an empty cache) with the screen off, then on; warm (the cache the cold run
filled) with the screen off, then on. The warm run with the screen on finds its verdicts
kept with the packages. The times are the sums of the ``aoti.check`` calls, taken inside
the tests, so the child's start (once per process) is counted in the screened runs.

Prints one JSON line on stdout: the seconds of each run and the ratios on/off.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from suite_runs import check_seconds


def run_suite(cache: Path, screen: bool, timings: Path) -> float:
    """Seconds of every ``aoti.check`` of one suite run."""
    return check_seconds(cache, timings, f"--aoti-crash-screen={'on' if screen else 'off'}")[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the result here")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-crash-screen-") as root:
        base = Path(root)
        timings = base / "timings.jsonl"
        seconds = {}
        for screen in (False, True):
            cache = base / f"cache-{'on' if screen else 'off'}"
            name = "on" if screen else "off"
            print(f"cold, screen {name} ...", file=sys.stderr)
            seconds[f"cold_{name}"] = run_suite(cache, screen, timings)
            print(f"warm, screen {name} ...", file=sys.stderr)
            seconds[f"warm_{name}"] = run_suite(cache, screen, timings)
    result = {
        "seconds": {key: round(value, 3) for key, value in seconds.items()},
        "cold_on_over_off": round(seconds["cold_on"] / seconds["cold_off"], 3),
        "warm_on_over_off": round(seconds["warm_on"] / seconds["warm_off"], 3),
    }
    print(json.dumps(result))
    if options.json:
        options.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
