"""Benchmark: what the fleet's remote store saves a CI machine that starts with an empty disk.

    python benchmarks/bench_remote.py [--quick] [--url URL] [--json PATH]

Two "machines" (two pytest processes, each with an empty local cache) run the benchmark
suite (``suite/test_bench_suite.py``) against one bucket: moto's S3 server started here on
127.0.0.1 (from ``moto[server]``), or ``--url`` (``file:///…`` or a real store, with
fsspec's usual configuration). Machine A signs with a key made here and publishes every
compile; machine B trusts A's public key and must compile nothing. Then every package is
fetched once more, by itself, to time the download and verification of each program.

Printed: per program, A's compile seconds against the fetch seconds, and in total; the
ratios are from this one run. One JSON line goes to stdout (or ``--json``), progress to
stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SUITE_FILE = HERE / "suite" / "test_bench_suite.py"
QUICK_MODELS = ("mlp", "conv")
FULL_MODELS = ("mlp", "conv", "buffer_mutation", "input_mutation", "dynamic_batch")


def log(message: str) -> None:
    print(f"[bench-remote {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@contextmanager
def moto_server() -> Iterator[str]:
    """moto's standalone S3 server on a free local port; yields its endpoint URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(
                        "moto's server did not start (pip install 'moto[server]')"
                    ) from None
                time.sleep(0.1)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=10)


def run_machine(
    name: str, url: str, tmp: Path, env: Mapping[str, str], models: tuple[str, ...]
) -> dict[str, Any]:
    """One machine: pytest on the suite with an empty local cache; returns its report."""
    report = tmp / f"{name}.json"
    command = [
        sys.executable,
        "-m",
        "pytest",
        str(SUITE_FILE),
        "-q",
        "-p",
        "no:cacheprovider",
        "--aoti-device=cpu",
        f"--aoti-cache-dir={tmp / name / 'cache'}",
        f"--aoti-cache-url={url}",
        f"--aoti-report={report}",
    ]
    child = {**env, "AOTI_BENCH_MODELS": ",".join(models)}
    log(f"machine {name}: {' '.join(command[3:])}")
    started = time.perf_counter()
    done = subprocess.run(command, env=child, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-2000:])
        raise SystemExit(f"machine {name} failed (exit {done.returncode})")
    document: dict[str, Any] = json.loads(report.read_text())
    document["wall_seconds"] = wall
    log(f"machine {name}: {wall:.1f} s")
    return document


def fetch_each(url: str, keys: list[str], tmp: Path, env: Mapping[str, str]) -> dict[str, float]:
    """Seconds to download and verify each program's package from the store, one by one."""
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        from pytest_aoti.fleet.open import open_remote

        problems: list[str] = []
        store = open_remote(
            url, mode="read", ini_options=None, ini_trusted=(), on_problem=problems.append
        )
        seconds = {}
        for key in keys:
            started = time.perf_counter()
            fetched = store.fetch(key, tmp / "fetch" / f"{key}.pt2")
            if fetched is None:
                raise SystemExit(f"program {key} could not be fetched: {problems}")
            seconds[key] = time.perf_counter() - started
        return seconds
    finally:
        os.environ.clear()
        os.environ.update(saved)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"Only {', '.join(QUICK_MODELS)}.")
    parser.add_argument("--url", help="A store to use instead of a local moto S3 server.")
    parser.add_argument("--json", type=Path, help="Write the figures here too.")
    args = parser.parse_args()
    models = QUICK_MODELS if args.quick else FULL_MODELS
    sys.path.insert(0, str(HERE.parent))
    from pytest_aoti.fleet.signing import (
        SIGNING_KEY_ENV,
        TRUSTED_KEYS_ENV,
        generate_key_pair,
    )

    tmp = Path(tempfile.mkdtemp(prefix="bench-remote-"))
    try:
        generate_key_pair(tmp / "key.pem", tmp / "key.pub")
        base = {k: v for k, v in os.environ.items() if k not in (SIGNING_KEY_ENV, TRUSTED_KEYS_ENV)}
        with contextlib.nullcontext(None) if args.url else moto_server() as endpoint:
            url = args.url or "s3://bench-fleet/ci"
            if endpoint is not None:
                base.update(
                    FSSPEC_S3_ENDPOINT_URL=endpoint,
                    AWS_ACCESS_KEY_ID="bench",
                    AWS_SECRET_ACCESS_KEY="bench",
                    AWS_DEFAULT_REGION="us-east-1",
                )
                import s3fs

                s3fs.S3FileSystem(endpoint_url=endpoint, key="bench", secret="bench").mkdir(
                    "bench-fleet"
                )
            a = run_machine("A", url, tmp, {**base, SIGNING_KEY_ENV: str(tmp / "key.pem")}, models)
            b = run_machine("B", url, tmp, {**base, TRUSTED_KEYS_ENV: str(tmp / "key.pub")}, models)
            programs = {c["test"]: c for c in a["checks"]}
            keys = sorted({c["program"] for c in a["checks"]})
            fetched = fetch_each(url, keys, tmp, {**base, TRUSTED_KEYS_ENV: str(tmp / "key.pub")})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if b["totals"]["compiled"] != 0:
        raise SystemExit(f"machine B compiled {b['totals']['compiled']} programs; expected 0")
    rows = []
    for check in b["checks"]:
        compiled = programs[check["test"]]
        rows.append(
            {
                "test": check["test"],
                "compile_seconds": round(compiled["compile_seconds"], 3),
                "fetch_seconds": round(fetched[check["program"]], 3),
                "package_source_b": check["source"],
                "check_seconds_a": round(compiled["check_seconds"], 3),
                "check_seconds_b": round(check["check_seconds"], 3),
            }
        )
    compile_total = sum(row["compile_seconds"] for row in rows)
    fetch_total = sum(row["fetch_seconds"] for row in rows)
    width = max(len(row["test"]) for row in rows)
    print(f"{'program':<{width}}  compile s  fetch s  compile/fetch", file=sys.stderr)
    for row in rows:
        ratio = row["compile_seconds"] / max(row["fetch_seconds"], 1e-9)
        print(
            f"{row['test']:<{width}}  {row['compile_seconds']:9.2f}  {row['fetch_seconds']:7.3f}"
            f"  {ratio:12.0f}x",
            file=sys.stderr,
        )
    print(
        f"{'total':<{width}}  {compile_total:9.2f}  {fetch_total:7.3f}  "
        f"{compile_total / max(fetch_total, 1e-9):12.0f}x;  suite wall A {a['wall_seconds']:.1f} s, "
        f"B {b['wall_seconds']:.1f} s",
        file=sys.stderr,
    )
    result = {
        "store": "moto S3" if not args.url else args.url,
        "programs": rows,
        "compile_seconds": round(compile_total, 3),
        "fetch_seconds": round(fetch_total, 3),
        "compile_over_fetch": round(compile_total / max(fetch_total, 1e-9), 1),
        "wall_a": round(a["wall_seconds"], 1),
        "wall_b": round(b["wall_seconds"], 1),
        "b_compiled": b["totals"]["compiled"],
        "b_remote": b["totals"].get("remote"),
    }
    line = json.dumps(result)
    print(line)
    if args.json is not None:
        args.json.write_text(line + "\n")


if __name__ == "__main__":
    main()
