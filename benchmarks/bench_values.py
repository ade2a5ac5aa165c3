"""Benchmark: what the values check costs a check, cold and warm, and per draw.

    python benchmarks/bench_values.py [--json PATH]

Runs the benchmark suite (``suite/test_bench_suite.py``: one ``aoti.check`` per model of
:data:`models.MAIN`) four times, each in its own fresh pytest process, one after the
other: cold (an empty cache) with ``--aoti-values=off``, then with the default
(``domain``, 16 draws); warm (the cache the cold run filled) off, then on. A draw is not
kept with the package: a warm run compares every draw again. The times are the sums of the
``aoti.check`` calls, taken inside the tests.

Prints one JSON line on stdout: the seconds of each run, the ratios on/off, and the values
check's seconds per draw (warm on less warm off, over the draws of every check).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from suite_runs import check_seconds

DRAWS = 16


def run_suite(cache: Path, values: str, timings: Path) -> tuple[float, int]:
    """Seconds of every ``aoti.check`` of one suite run, and how many checks ran."""
    return check_seconds(cache, timings, f"--aoti-values={values}", f"--aoti-values-draws={DRAWS}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the result here")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-values-") as root:
        base = Path(root)
        timings = base / "timings.jsonl"
        seconds = {}
        checks = 0
        for values in ("off", "domain"):
            cache = base / f"cache-{values}"
            name = "on" if values == "domain" else "off"
            print(f"cold, values {values} ...", file=sys.stderr)
            seconds[f"cold_{name}"], checks = run_suite(cache, values, timings)
            print(f"warm, values {values} ...", file=sys.stderr)
            seconds[f"warm_{name}"], checks = run_suite(cache, values, timings)
    per_draw = (seconds["warm_on"] - seconds["warm_off"]) / max(1, checks * DRAWS)
    result = {
        "seconds": {key: round(value, 3) for key, value in seconds.items()},
        "checks": checks,
        "draws_per_check": DRAWS,
        "cold_on_over_off": round(seconds["cold_on"] / seconds["cold_off"], 3),
        "warm_on_over_off": round(seconds["warm_on"] / seconds["warm_off"], 3),
        "values_seconds_per_draw": round(per_draw, 5),
        "values_seconds_over_cold_check": round(
            (seconds["warm_on"] - seconds["warm_off"]) / seconds["cold_off"], 4
        ),
    }
    print(json.dumps(result))
    if options.json:
        options.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
