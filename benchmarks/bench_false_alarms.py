"""False alarms of the default check on correct programs ported from PyTorch's own AOTI tests.

    python benchmarks/bench_false_alarms.py [NAME ...] [--cache DIR] [-n N]

Every program of ``tests/upstream_programs.py`` (or those named) agrees with eager through the
raw pipeline (``benchmarks/raw_upstream.py`` shows it): each is checked here with the default
``aoti.check`` (values draws, crash screen, deployment probes, generated shapes inside its
ranges where the raw engine is right at every size) in one fresh pytest process. A failed
check is a false alarm. Prints one line per program (outcome, values draws checked and
refused, the first line of a failure) and the count of false alarms; exits 1 when there is one.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"
sys.path.insert(0, str(TESTS))

import upstream_programs  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="programs to check (default: all)")
    parser.add_argument("--cache", type=Path, help="artifact cache (default: a fresh one)")
    parser.add_argument("-n", default="0", help="pytest-xdist workers (default 0)")
    options = parser.parse_args()
    names = options.names or [program.name for program in upstream_programs.PROGRAMS]
    with tempfile.TemporaryDirectory(prefix="pytest-aoti-false-alarms-") as root:
        folder = Path(root)
        (folder / "test_upstream.py").write_text(upstream_programs.check_source(names))
        (folder / "conftest.py").write_text(f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n")
        report = folder / "aoti.json"
        cache = options.cache or folder / "cache"
        started = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                str(folder),
                "-q",
                "-p",
                "no:cacheprovider",
                "-n",
                options.n,
                "--aoti-device=cpu",
                f"--aoti-cache-dir={cache}",
                f"--aoti-report={report}",
            ],
            cwd=folder,
            check=False,
        )
        seconds = time.perf_counter() - started
        records = json.loads(report.read_text())["checks"]
    alarms = 0
    for record in sorted(records, key=lambda r: r["test"]):
        name = record["test"].split("-")[-1].rstrip("]")
        values = record.get("values") or {}
        line = f"{name:36} {record['outcome']:7} values {values.get('checked', 0):>2} checked"
        line += f", {values.get('refused', 0)} refused"
        if record["outcome"] != "passed":
            alarms += 1
            finding = record.get("finding") or {}
            line += f"  {(finding.get('message') or finding.get('kind') or '')[:120]}"
        print(line)
    print(
        f"{alarms} false alarm(s) in {len(records)} checks of {len(names)} programs, {seconds:.0f} s"
    )
    return 1 if alarms else 0


if __name__ == "__main__":
    sys.exit(main())
