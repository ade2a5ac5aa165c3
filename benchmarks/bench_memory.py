"""Benchmark: resident memory a long suite of large models costs, per distinct program.

    python benchmarks/bench_memory.py [--models K] [--width W] [--layers L]
                                      [--cache-dir DIR] [--json PATH]

It writes a pytest suite of ``K`` distinct large models (``L``-layer ``W``-wide MLPs, each
from its own seed, so each is its own program), one test each calling
``aoti.check(model, (x,))``, and runs it twice, each time in a fresh process:

1. ``cold``: fills the artifact cache (each 2048-wide model compiles in 10-20 s; with a
   ``--cache-dir`` filled by an earlier run, this is a second warm run);
2. ``warm``: the measured run, every package loaded from the cache;
3. ``warm_trimmed``: the same, with ``malloc_trim(0)`` before each measurement: the part of
   the growth that is free heap glibc keeps rather than memory anything holds.

A generated conftest records the process's resident set size (``VmRSS``) after each test,
after ``gc.collect()``, with glibc's heap figures (``mallinfo2``) and the bytes of the
tensors still alive, which tell what objects hold from what the allocator keeps.

Two more processes set the floor torch itself sets, on the same packages: for each, build
the same model and run it eagerly (as a test does), drop it, then ``aoti_load_package`` the
package once and run it; ``raw_kept`` keeps every engine (a live engine holds a copy of
the weights besides the library torch maps), ``raw_dropped`` drops each one (what stays is
the library, which torch never unloads).

Growth per program is the mean RSS step between consecutive tests after the first (the
first pays one-time costs: inductor's import, the first load), and the ratio is that over
the mean package size. Prints one JSON line on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MB = 2**20
# variables of the caller's environment that would change how the measured processes run
_STEERING_ENV = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_XDIST_AUTO_NUM_WORKERS")

# the model and its input, shared by the generated suite and the raw process (same seeds,
# same programs, same packages)
MODEL_SOURCE = '''
import torch


def make_model(seed: int, width: int, layers: int) -> tuple[torch.nn.Module, torch.Tensor]:
    """A ``layers``-layer ``width``-wide MLP and its input, from ``seed`` alone."""
    generator = torch.Generator().manual_seed(seed)
    blocks: list[torch.nn.Module] = []
    for _ in range(layers):
        linear = torch.nn.Linear(width, width)
        with torch.no_grad():
            bound = width**-0.5
            linear.weight.uniform_(-bound, bound, generator=generator)
            linear.bias.uniform_(-bound, bound, generator=generator)
        blocks += [linear, torch.nn.ReLU()]
    x = torch.randn(8, width, generator=generator)
    return torch.nn.Sequential(*blocks).eval(), x
'''

# what both the generated conftest and the raw process record after each step
PROBE_SOURCE = '''
import ctypes
import gc
import warnings


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost",
        )
    ]


def _mallinfo():
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
    except (OSError, AttributeError):  # not glibc, or glibc < 2.33
        return None
    return libc.mallinfo2


_MALLINFO = _mallinfo()
MB = 2**20


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def live_tensor_mb() -> float:
    """Bytes of the distinct CPU storages behind the tensors the garbage collector sees."""
    import torch

    seen = {}
    with warnings.catch_warnings():  # torch's lazily deprecated attributes, hit by isinstance
        warnings.simplefilter("ignore")
        objects = gc.get_objects()
    for obj in objects:
        try:
            if isinstance(obj, torch.Tensor) and obj.device.type == "cpu" and obj.layout == torch.strided:
                storage = obj.untyped_storage()
                seen[storage.data_ptr()] = storage.nbytes()
        except Exception:  # fake, meta or otherwise storage-less tensors
            continue
    return sum(seen.values()) / MB


def probe(label: str, trim: bool = False) -> dict:
    gc.collect()
    if trim:  # hand glibc's free heap pages back to the system, as a trimming plugin would
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    record = {"label": label, "rss_mb": round(rss_mb(), 1)}
    if _MALLINFO is not None:
        info = _MALLINFO()
        # heap: arena pages glibc holds (brk and mmapped arenas); in_use: what live
        # allocations use of them; large mmapped blocks (over the mmap threshold) apart
        record["malloc_heap_mb"] = round(info.arena / MB, 1)
        record["malloc_in_use_mb"] = round(info.uordblks / MB, 1)
        record["malloc_mmapped_mb"] = round(info.hblkhd / MB, 1)
    record["live_tensors_mb"] = round(live_tensor_mb(), 1)
    return record
'''

TEST_SOURCE = """
import pytest
from bench_memory_model import make_model

WIDTH = {width}
LAYERS = {layers}


@pytest.mark.parametrize("seed", {seeds!r})
def test_large_mlp(aoti, seed):
    model, x = make_model(seed, WIDTH, LAYERS)
    aoti.check(model, (x,))
"""

CONFTEST_SOURCE = """
import json
import os

import pytest
from bench_memory_probe import probe

_OUT = os.environ["AOTI_BENCH_MEMORY_OUT"]
_TRIM = os.environ.get("AOTI_BENCH_MEMORY_TRIM") == "1"


def _write(record):
    with open(_OUT, "a") as out:
        out.write(json.dumps(record) + "\\n")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not getattr(item.session, "_memory_started", False):
        item.session._memory_started = True
        _write(probe("start"))  # torch imported, nothing of the plugin's loaded yet
    result = yield
    # after teardown: what stays is what the session keeps of this test
    record = probe(item.nodeid, trim=_TRIM)
    record["program"] = dict(item.user_properties).get("aoti_program")
    _write(record)
    return result
"""

RAW_SOURCE = """
import json
import sys
from pathlib import Path

import torch
import torch._inductor

from bench_memory_model import make_model
from bench_memory_probe import probe

out, width, layers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
jobs = json.loads(sys.argv[4])  # [[seed, package path], ...]
keep = sys.argv[5] == "keep"
records = [probe("start")]
engines = []
for seed, package in jobs:
    model, x = make_model(seed, width, layers)
    with torch.no_grad():
        model(x)
    del model
    engine = torch._inductor.aoti_load_package(package)
    engine(x)
    if keep:  # else dropped: what stays is the library torch never unloads
        engines.append(engine)
    del engine
    records.append(probe(f"seed {seed}"))
Path(out).write_text(json.dumps(records))
"""


def log(message: str) -> None:
    """Progress for humans, on stderr (stdout carries only the JSON line)."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def child_env(workdir: Path, **extra: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in _STEERING_ENV}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(workdir), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def write_suite(workdir: Path, seeds: Sequence[int], width: int, layers: int) -> None:
    (workdir / "bench_memory_model.py").write_text(MODEL_SOURCE)
    (workdir / "bench_memory_probe.py").write_text(PROBE_SOURCE)
    (workdir / "conftest.py").write_text(CONFTEST_SOURCE)
    (workdir / "raw_worker.py").write_text(RAW_SOURCE)
    (workdir / "test_memory_suite.py").write_text(
        TEST_SOURCE.format(width=width, layers=layers, seeds=list(seeds))
    )


def run_suite(
    workdir: Path, cache: Path, label: str, *, trim: bool = False
) -> tuple[list[dict[str, Any]], float]:
    """One pytest process on the generated suite; the RSS records and its wall time.

    ``trim``: ``malloc_trim(0)`` after each test, before measuring: what the figures would
    be without the free heap glibc keeps (fragmentation left by eager runs and copies)."""
    out = workdir / f"{label}.jsonl"
    out.unlink(missing_ok=True)
    runner = textwrap.dedent(
        f"""
        import sys, pytest
        sys.exit(pytest.main([
            {str(workdir / "test_memory_suite.py")!r}, "--aoti-device=cpu",
            "--aoti-cache-dir={cache}", "-p", "no:cacheprovider", "-p", "no:xdist",
            "-q", "--rootdir={workdir}",
        ]))
        """
    )
    log(f"{label}: pytest on {workdir.name}")
    started = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-c", runner],
        cwd=workdir,
        env=child_env(
            workdir, AOTI_BENCH_MEMORY_OUT=str(out), AOTI_BENCH_MEMORY_TRIM=str(int(trim))
        ),
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    if completed.returncode != 0:
        raise RuntimeError(f"{label} run failed ({completed.returncode}):\n{completed.stdout}")
    records = [json.loads(line) for line in out.read_text().splitlines()]
    log(f"{label}: {wall:.1f} s, RSS {[record['rss_mb'] for record in records]} MB")
    return records, wall


def package_path(cache: Path, key: str | None) -> Path:
    found = sorted(cache.glob(f"v*/entries/{key}/package.pt2")) if key else []
    if not found:
        raise RuntimeError(f"no package of program {key} in {cache}")
    return found[-1]


def run_raw(
    workdir: Path, seeded: Sequence[tuple[int, Path]], width: int, layers: int, *, keep: bool
) -> list[dict[str, Any]]:
    """Raw torch calls on the same packages; ``keep``: every engine stays loaded."""
    label = "raw_kept" if keep else "raw_dropped"
    out = workdir / f"{label}.json"
    jobs = json.dumps([[seed, str(path)] for seed, path in seeded])
    log(f"{label}: load each package once, {'keep' if keep else 'drop'} its engine")
    subprocess.run(
        [
            sys.executable,
            str(workdir / "raw_worker.py"),
            str(out),
            str(width),
            str(layers),
            jobs,
            "keep" if keep else "drop",
        ],
        cwd=workdir,
        env=child_env(workdir),
        check=True,
    )
    records: list[dict[str, Any]] = json.loads(out.read_text())
    log(f"{label}: RSS {[record['rss_mb'] for record in records]} MB")
    return records


def growth(records: Sequence[Mapping[str, Any]], package_mb: float) -> dict[str, Any]:
    """RSS after each step, the steps, and the mean step after the first over the package."""
    rss = [float(record["rss_mb"]) for record in records]
    steps = [round(after - before, 1) for before, after in zip(rss, rss[1:])]
    later = steps[1:] or steps
    per_program = statistics.mean(later) if later else float("nan")
    figures: dict[str, Any] = {
        "rss_mb": rss,
        "steps_mb": steps,
        "growth_per_program_mb": round(per_program, 1),
        "ratio_to_package": round(per_program / package_mb, 2),
    }
    for name in ("malloc_heap_mb", "malloc_in_use_mb", "malloc_mmapped_mb", "live_tensors_mb"):
        if all(name in record for record in records):
            figures[name] = [record[name] for record in records]
    return figures


def benchmark(models: int, width: int, layers: int, cache_dir: Path | None) -> dict[str, Any]:
    seeds = list(range(1, models + 1))
    with tempfile.TemporaryDirectory(prefix="aoti-bench-memory-") as tmp:
        workdir = Path(tmp)
        cache = cache_dir or workdir / "cache"
        write_suite(workdir, seeds, width, layers)
        cold, cold_wall = run_suite(workdir, cache, "cold")
        warm, warm_wall = run_suite(workdir, cache, "warm")
        trimmed, _ = run_suite(workdir, cache, "warm_trimmed", trim=True)
        # each test recorded its program's key: the raw process loads the same packages
        keys = [record["program"] for record in warm[1:]]
        ours = [package_path(cache, key) for key in keys]
        sizes = [path.stat().st_size / MB for path in ours]
        package_mb = statistics.mean(sizes)
        seeded = list(zip(seeds, ours))
        raw_kept = run_raw(workdir, seeded, width, layers, keep=True)
        raw_dropped = run_raw(workdir, seeded, width, layers, keep=False)
    return {
        "benchmark": "memory",
        "models": models,
        "width": width,
        "layers": layers,
        "package_mb": [round(size, 1) for size in sizes],
        "warm": growth(warm, package_mb),
        "warm_trimmed": growth(trimmed, package_mb),
        "cold": growth(cold, package_mb),
        "raw_kept": growth(raw_kept, package_mb),
        "raw_dropped": growth(raw_dropped, package_mb),
        "wall_s": {"cold": round(cold_wall, 1), "warm": round(warm_wall, 1)},
        "python": sys.version.split()[0],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--models", type=int, default=5, help="distinct programs (default 5)")
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument(
        "--cache-dir",
        type=Path,
        help="an artifact cache to fill and reuse across runs (default: a fresh one)",
    )
    parser.add_argument("--json", type=Path, help="also write the JSON line to this file")
    options = parser.parse_args(argv)
    if options.models < 2:
        parser.error("--models must be at least 2 (the first test pays one-time costs)")
    result = benchmark(options.models, options.width, options.layers, options.cache_dir)
    line = json.dumps(result)
    print(line)
    if options.json is not None:
        options.json.write_text(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
