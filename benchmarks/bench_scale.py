"""Benchmark: what the plugin costs on top of the raw pipeline, as the model grows.

    python benchmarks/bench_scale.py [--widths W,W,...] [--reps N] [--quick]
                                     [--device cpu|cuda] [--cprofile] [--keep DIR]
                                     [--model mlp|transformer] [--busy N] [--json PATH]

The models are 4-layer MLPs (``Sequential`` of 4 x ``Linear(W, W)``, ``ReLU``), batch 8,
float32, weights seeded from the width alone: widths 1472 (8.7M parameters), 2912 (34M)
and 5824 (135M) by default; 16384 is about 1.07B parameters (4.3 GB of weights: the
user's choice, with the memory for it). ``--quick``: width 1472 only, one rep.
``--model transformer``: a 2-layer ``TransformerEncoder`` (two heads, feed-forward four
times the width) on 2 sequences of 16 tokens instead, e.g. ``--widths 32,64``. ``--busy N``:
N other processes each spin on one core for the whole benchmark (a loaded machine). Each
run's JSON has ``searches``: per search of the check, ``[ran, planned, left]``.

Each rep runs, for each width in turn, three fresh processes one after the other:

1. ``raw``: a Python script that builds the model and input, then ``torch.export.export``,
   ``run_decompositions``, ``torch._inductor.aoti_compile_and_package``,
   ``aoti_load_package``, one engine call and ``torch.testing.assert_close`` against an
   eager call (no ``torch.no_grad()``: called as a user would);
2. ``cold``: ``python -m pytest -q test_scale.py --aoti-cache-dir=<empty dir>
   --aoti-report=<path>``, the test calling ``aoti.check(model, (x,))`` with the defaults;
3. ``warm``: the same pytest command again, with the cache dir the cold run filled.

Each is timed wall-clock from its start to its exit, so ``import torch`` and pytest's
start-up count. While it runs, the summed RSS of the process and all its descendants (the
C++ compilers, the crash screen's child) is sampled every 50 ms from ``/proc``: ``tree`` is
the peak of that sum, ``largest`` the peak of the largest single process, and ``tree_pss``
the peak of the summed PSS (shared pages counted once; ``smaps_rollup``, every 200 ms).
``largest_hwm`` is the kernel's own high-water mark of the largest process (``wait4``),
which sampling cannot miss. A process reparented away from the tree is not counted.

Every cold and warm run has its own directory (its rootdir, with a ``pytest.ini``, and its
``--basetemp``); each rep's cold run starts from a new ``--aoti-cache-dir`` that holds no
package, only the machine's compile target and the C++ loader's runner (found and built
once per cache by the plugin, as for every cold program on a machine but the first). All processes share one
``TORCHINDUCTOR_CACHE_DIR``, new for the benchmark run, so raw and cold pay the same compile
(inductor's FX graph cache is off in AOT mode: no process reuses another's compile); one
untimed raw process at the smallest width runs first, since the first compile on a machine
builds inductor's precompiled headers, then one untimed plugin run of a width-64 model (the
machine's target, the plugin's bytecode). Python writes and reuses bytecode in every
process, as on a user's machine (``PYTHONDONTWRITEBYTECODE`` is dropped).

Per width: the median and min-max of each figure, the ratios of the medians (cold/raw and
warm/raw time, cold/raw tree and largest memory) and each rep's own cold/raw, so run-to-run
noise shows; per-part seconds of the raw script (its own laps) and of the plugin runs (every
numeric ``*_seconds`` field, ``seconds`` inside a mapping, and any mapping of seconds such as
``seconds_by_check``, of the JSON report's check records and totals). ``other_load_cores``:
cores other processes kept busy meanwhile (/proc/stat); wall times mean little above 0.

``--cprofile`` runs the cold and warm pytest processes under ``python -m cProfile`` and
prints the top 25 cumulative entries of each at the end (their times are inflated then).
``--device cuda`` (a CUDA build on a GPU machine) runs the model on the GPU and records
``torch.cuda.max_memory_allocated()`` at the end of the raw script and after ``aoti.check``
in the test (the engine child's allocations are not in that figure), and, where
``nvidia-smi`` is on the path, ``device tree``: the peak device memory of the process and
its descendants together (the engine child's engine included), sampled every 0.25 s.

The table goes to stderr with the progress; stdout carries one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import pstats
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine_load import machine_busy_seconds  # noqa: E402

MB = 2**20
LAYERS = 4
BATCH = 8
DEFAULT_WIDTHS = (1472, 2912, 5824)
KINDS = ("raw", "cold", "warm")
SAMPLE_SECONDS = 0.05  # RSS of the tree
PSS_SECONDS = 0.2  # PSS of the tree (smaps_rollup walks the page tables: costlier)
GPU_SECONDS = 0.25  # device memory of the tree (nvidia-smi, where there is one)
PROFILE_LINES = 25
MEMORY_FIGURES = (
    "tree_mb",
    "largest_mb",
    "tree_pss_mb",
    "largest_hwm_mb",
    "cuda_max_mb",
    "gpu_tree_mb",
)
# variables of the caller's environment that would change how the measured processes run
_STEERING_ENV = (
    "PYTEST_ADDOPTS",
    "PYTEST_PLUGINS",
    "PYTEST_XDIST_AUTO_NUM_WORKERS",
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD",
    "TORCHINDUCTOR_CACHE_DIR",
)
_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
WARM_UP_WIDTH = 64
"""The plugin's warm-up model: writes the bytecode and finds the machine's compile target."""

# the model and its input, shared by the raw script and the test (same program, same weights)
MODEL_SOURCE = f'''
import torch

LAYERS = {LAYERS}
BATCH = {BATCH}


def make(width, device="cpu"):
    """A {LAYERS}-layer ``width``-wide MLP and its float32 input, from the width alone."""
    generator = torch.Generator().manual_seed(width)
    bound = width**-0.5
    blocks = []
    for _ in range(LAYERS):
        linear = torch.nn.utils.skip_init(torch.nn.Linear, width, width)
        with torch.no_grad():
            linear.weight.uniform_(-bound, bound, generator=generator)
            linear.bias.uniform_(-bound, bound, generator=generator)
        blocks += [linear, torch.nn.ReLU()]
    x = torch.randn(BATCH, width, generator=generator)
    return torch.nn.Sequential(*blocks).to(device), x.to(device)
'''

TRANSFORMER_LAYERS = 2
TRANSFORMER_BATCH, TRANSFORMER_SEQUENCE = 2, 16
TRANSFORMER_SOURCE = f'''
import torch

LAYERS = {TRANSFORMER_LAYERS}


def make(width, device="cpu"):
    """A {TRANSFORMER_LAYERS}-layer ``width``-wide transformer encoder (two heads, feed-forward
    four times as wide, eval mode) and its float32 input of {TRANSFORMER_BATCH} sequences of
    {TRANSFORMER_SEQUENCE}, from the width alone."""
    torch.manual_seed(width)
    layer = torch.nn.TransformerEncoderLayer(
        width, nhead=2, dim_feedforward=4 * width, dropout=0.0, batch_first=True
    )
    model = torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False).eval()
    generator = torch.Generator().manual_seed(width)
    x = torch.randn({TRANSFORMER_BATCH}, {TRANSFORMER_SEQUENCE}, width, generator=generator)
    return model.to(device), x.to(device)
'''
MODELS = {"mlp": MODEL_SOURCE, "transformer": TRANSFORMER_SOURCE}
"""``--model``: the source of ``make(width, device)``, shared by the raw script and the test."""

RAW_SOURCE = """
import time

_started = time.perf_counter()
import json
import sys

import torch
import torch._inductor

from scale_model import make

out, width, device, package = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
seconds = {"import": time.perf_counter() - _started}


def lap(name, started):
    seconds[name] = time.perf_counter() - started


started = time.perf_counter()
model, x = make(width, device)
lap("build", started)
started = time.perf_counter()
exported = torch.export.export(model, (x,))
lap("export", started)
started = time.perf_counter()
exported = exported.run_decompositions()
lap("run_decompositions", started)
started = time.perf_counter()
path = torch._inductor.aoti_compile_and_package(exported, package_path=package)
lap("aoti_compile_and_package", started)
started = time.perf_counter()
engine = torch._inductor.aoti_load_package(path)
lap("aoti_load_package", started)
started = time.perf_counter()
actual = engine(x)
lap("engine_call", started)
started = time.perf_counter()
expected = model(x)
lap("eager_call", started)
started = time.perf_counter()
torch.testing.assert_close(actual, expected)
lap("assert_close", started)
record = {"seconds": seconds, "torch": torch.__version__}
if device == "cuda":
    record["cuda_max_mb"] = torch.cuda.max_memory_allocated() / 2**20
with open(out, "w") as file:
    json.dump(record, file)
"""

TEST_SOURCE = """
import json
import os

import torch
from scale_model import make

WIDTH = {width}


def test_model(aoti):
    model, x = make(WIDTH, aoti.device)
    aoti.check(model, (x,))
    if aoti.device.type == "cuda":
        with open(os.environ["AOTI_BENCH_SCALE_OUT"], "w") as file:
            json.dump({{"cuda_max_mb": torch.cuda.max_memory_allocated() / 2**20}}, file)
"""


def log(message: str) -> None:
    """Progress for humans, on stderr (stdout carries only the JSON line)."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def parameters(width: int, model: str = "mlp") -> int:
    if model == "transformer":  # attention 4w^2+4w, feed-forward 8w^2+5w, two norms 4w
        return TRANSFORMER_LAYERS * (12 * width * width + 13 * width)
    return LAYERS * (width * width + width)


# -- one measured process -----------------------------------------------------------------


def _descendants(root: int) -> list[int]:
    """``root`` and every process below it, from the parent ids in ``/proc/*/stat``."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as file:
                stat = file.read()
        except OSError:  # exited meanwhile
            continue
        parent = int(stat[stat.rindex(b")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as file:
            return int(file.read().split()[1]) * _PAGE_KB
    except (OSError, IndexError, ValueError):
        return 0


def _pss_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as file:
            for line in file:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


class TreeSampler(threading.Thread):
    """Samples a process tree's memory until stopped; keeps the peaks (kB)."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.stopped = threading.Event()
        self.tree_kb = 0
        self.largest_kb = 0
        self.pss_kb: int | None = None
        self.samples = 0
        self.most_processes = 0
        self.gpu_mb: float | None = None
        """Peak device memory of the tree's processes together (``nvidia-smi``), if any."""

    def run(self) -> None:
        next_pss = next_gpu = 0.0
        gpu = shutil.which("nvidia-smi")
        while not self.stopped.is_set():
            pids = _descendants(self.root)
            if gpu is not None and time.monotonic() >= next_gpu:
                used = _gpu_mb(gpu, pids)
                if used is not None:
                    self.gpu_mb = max(self.gpu_mb or 0.0, used)
                next_gpu = time.monotonic() + GPU_SECONDS
            rss = [_rss_kb(pid) for pid in pids]
            self.tree_kb = max(self.tree_kb, sum(rss))
            self.largest_kb = max(self.largest_kb, max(rss, default=0))
            self.most_processes = max(self.most_processes, sum(1 for kb in rss if kb))
            self.samples += 1
            if time.monotonic() >= next_pss:
                pss = [_pss_kb(pid) for pid in pids]
                readable = [kb for kb in pss if kb is not None]
                if readable:
                    self.pss_kb = max(self.pss_kb or 0, sum(readable))
                next_pss = time.monotonic() + PSS_SECONDS
            self.stopped.wait(SAMPLE_SECONDS)


def _gpu_mb(nvidia_smi: str, pids: Sequence[int]) -> float | None:
    """Device memory the processes ``pids`` hold now, in MB (every engine, the child's too)."""
    try:
        listing = subprocess.run(
            [nvidia_smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    used = 0.0
    for line in listing.splitlines():
        pid, _, memory = line.partition(",")
        if pid.strip().isdigit() and int(pid) in pids:
            try:
                used += float(memory)
            except ValueError:
                continue
    return used


def run_measured(
    command: Sequence[str], cwd: Path, env: Mapping[str, str], label: str
) -> dict[str, Any]:
    """Run ``command`` to its exit: wall and CPU seconds, memory peaks; raise if it fails."""
    stdout, stderr = cwd / f"{label}.stdout", cwd / f"{label}.stderr"
    busy_before = machine_busy_seconds()
    with stdout.open("wb") as out, stderr.open("wb") as err:
        started = time.perf_counter()
        process = subprocess.Popen(list(command), cwd=cwd, env=dict(env), stdout=out, stderr=err)
        sampler = TreeSampler(process.pid)
        sampler.start()
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        sampler.stopped.set()
        sampler.join()
    process.returncode = os.waitstatus_to_exitcode(status)
    busy_after = machine_busy_seconds()
    cpu = usage.ru_utime + usage.ru_stime  # the process and its waited-for descendants
    if process.returncode != 0:
        tail = "\n".join((stdout.read_text() + stderr.read_text()).splitlines()[-40:])
        raise RuntimeError(f"{label} failed (exit {process.returncode}):\n{tail}")
    others = None
    if busy_before is not None and busy_after is not None:
        others = round(max(0.0, busy_after - busy_before - cpu) / wall, 2)
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "tree_mb": round(sampler.tree_kb / 1024, 1),
        "largest_mb": round(sampler.largest_kb / 1024, 1),
        "tree_pss_mb": None if sampler.pss_kb is None else round(sampler.pss_kb / 1024, 1),
        "gpu_tree_mb": None if sampler.gpu_mb is None else round(sampler.gpu_mb, 1),
        "largest_hwm_mb": round(usage.ru_maxrss / 1024, 1),  # kB on Linux
        "processes": sampler.most_processes,
        "samples": sampler.samples,
        "other_load_cores": others,
    }


# -- the three kinds of process --------------------------------------------------------------


def child_env(shared: Path, inductor_cache: Path, **extra: str) -> dict[str, str]:
    """The caller's environment without variables that steer the runs, plus ``extra``; Python
    writes and reuses bytecode, as on a user's machine."""
    env = {name: value for name, value in os.environ.items() if name not in _STEERING_ENV}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shared), env.get("PYTHONPATH")]))
    env["TORCHINDUCTOR_CACHE_DIR"] = str(inductor_cache)
    env.update(extra)
    return env


def run_raw(
    rundir: Path, width: int, device: str, shared: Path, env: Mapping[str, str]
) -> dict[str, Any]:
    """One raw-script process; its figures and the script's own laps."""
    rundir.mkdir(parents=True)
    out = rundir / "raw.json"
    script = shared / "raw_scale.py"
    command = [sys.executable, str(script), str(out), str(width), device, str(rundir / "m.pt2")]
    figures = run_measured(command, rundir, env, "raw")
    written = json.loads(out.read_text())
    figures["parts"] = {name: round(value, 3) for name, value in written["seconds"].items()}
    figures["torch"] = written["torch"]
    if "cuda_max_mb" in written:
        figures["cuda_max_mb"] = round(written["cuda_max_mb"], 1)
    return figures


def run_plugin(
    kind: str,
    rundir: Path,
    width: int,
    device: str,
    cache: Path,
    env: Mapping[str, str],
    profile: bool,
) -> dict[str, Any]:
    """One pytest process checking the width's model; its figures and the report's parts."""
    rundir.mkdir(parents=True)
    (rundir / "pytest.ini").write_text("[pytest]\n")  # this directory is the rootdir
    (rundir / "test_scale.py").write_text(TEST_SOURCE.format(width=width))
    report, out = rundir / "report.json", rundir / "cuda.json"
    command = [sys.executable]
    if profile:
        command += ["-m", "cProfile", "-o", str(rundir / f"{kind}.prof")]
    command += [
        "-m",
        "pytest",
        "-q",
        "test_scale.py",
        f"--rootdir={rundir}",
        f"--basetemp={rundir / 'basetemp'}",
        f"--aoti-device={device}",
        f"--aoti-cache-dir={cache}",
        f"--aoti-report={report}",
        # how to load the plugin where it is on the path but not installed (-p ...)
        *shlex.split(os.environ.get("AOTI_BENCH_PYTEST_ARGS", "")),
    ]
    figures = run_measured(command, rundir, {**env, "AOTI_BENCH_SCALE_OUT": str(out)}, kind)
    if not report.exists():  # under cProfile the exit status is always 0
        raise RuntimeError(f"{kind}: no report at {report}; see {rundir}")
    document = json.loads(report.read_text())
    outcomes = [record.get("outcome") for record in document.get("checks", [])]
    if outcomes != ["passed"]:
        raise RuntimeError(f"{kind}: expected one passing check, got {outcomes}; see {rundir}")
    figures["parts"] = report_parts(document)
    figures["cache_hit"] = document["checks"][0].get("cache_hit")
    # how deep each search went: [ran this run, planned, left for later runs]
    searches = (document["checks"][0].get("budget") or {}).get("checks") or {}
    figures["searches"] = {
        name: [item.get("ran"), item.get("planned"), item.get("left")]
        for name, item in searches.items()
    }
    checked = figures["parts"].get("check_seconds")
    if checked is not None:  # pytest's start-up, import, collection, teardown and report
        figures["outside_check_s"] = round(figures["wall_s"] - checked, 3)
    if out.exists():
        figures["cuda_max_mb"] = round(json.loads(out.read_text())["cuda_max_mb"], 1)
    if profile:
        figures["cprofile"] = str(rundir / f"{kind}.prof")
    return figures


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def report_parts(document: Mapping[str, Any]) -> dict[str, float]:
    """The seconds a report holds, summed over its check records, found by name alone.

    A record's numeric ``*_seconds`` fields (not ``original_*``: the earlier compile's, on a
    cache hit), ``seconds`` inside a mapping (``values.seconds``) and every number in a
    mapping named with ``seconds`` (``seconds_by_check.parity``); the totals' ``*_seconds``
    as ``totals.<name>``. Absent fields are simply absent.
    """
    parts: dict[str, float] = {}

    def add(name: str, value: Any) -> None:
        if _number(value):
            parts[name] = parts.get(name, 0.0) + float(value)

    for record in document.get("checks", []):
        for name, value in record.items():
            if name.startswith("original_"):
                continue
            if name.endswith("_seconds"):
                add(name, value)
            elif isinstance(value, Mapping):
                for inner, number in value.items():
                    if "seconds" in name or inner == "seconds" or inner.endswith("_seconds"):
                        add(f"{name}.{inner}", number)
    for name, value in document.get("totals", {}).items():
        if name.endswith("_seconds"):
            add(f"totals.{name}", value)
    return {name: round(value, 4) for name, value in parts.items()}


# -- the benchmark --------------------------------------------------------------------------


def _spread(values: Sequence[float | None]) -> dict[str, Any] | None:
    known = [value for value in values if value is not None]
    if not known:
        return None
    return {
        "median": round(statistics.median(known), 3),
        "min": round(min(known), 3),
        "max": round(max(known), 3),
        "runs": list(values),
    }


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, 3)


def summarize(runs: Sequence[Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """Median, min and max of each figure and part per kind; ratios of the medians."""
    summary: dict[str, Any] = {}
    for kind in KINDS:
        figures: dict[str, Any] = {}
        for figure in ("wall_s", "cpu_s", "outside_check_s", *MEMORY_FIGURES):
            spread = _spread([run[kind].get(figure) for run in runs])
            if spread is not None:
                figures[figure] = spread
        names = sorted({name for run in runs for name in run[kind]["parts"]})
        figures["parts"] = {
            name: statistics.median(
                run[kind]["parts"][name] for run in runs if name in run[kind]["parts"]
            )
            for name in names
        }
        summary[kind] = figures

    def median(kind: str, figure: str) -> float | None:
        spread = summary[kind].get(figure)
        return None if spread is None else float(spread["median"])

    summary["ratios"] = {
        "cold_over_raw_wall": _ratio(median("cold", "wall_s"), median("raw", "wall_s")),
        "warm_over_raw_wall": _ratio(median("warm", "wall_s"), median("raw", "wall_s")),
        "cold_over_raw_tree": _ratio(median("cold", "tree_mb"), median("raw", "tree_mb")),
        "cold_over_raw_largest": _ratio(median("cold", "largest_mb"), median("raw", "largest_mb")),
        "cold_over_raw_tree_pss": _ratio(
            median("cold", "tree_pss_mb"), median("raw", "tree_pss_mb")
        ),
        "warm_over_raw_tree": _ratio(median("warm", "tree_mb"), median("raw", "tree_mb")),
        "cold_over_raw_cuda_max": _ratio(
            median("cold", "cuda_max_mb"), median("raw", "cuda_max_mb")
        ),
        "cold_over_raw_gpu_tree": _ratio(
            median("cold", "gpu_tree_mb"), median("raw", "gpu_tree_mb")
        ),
    }
    summary["per_rep"] = {
        "cold_over_raw_wall": [_ratio(run["cold"]["wall_s"], run["raw"]["wall_s"]) for run in runs],
        "warm_over_raw_wall": [_ratio(run["warm"]["wall_s"], run["raw"]["wall_s"]) for run in runs],
        "cold_over_raw_tree": [
            _ratio(run["cold"]["tree_mb"], run["raw"]["tree_mb"]) for run in runs
        ],
    }
    return summary


def benchmark(
    widths: Sequence[int],
    reps: int,
    device: str,
    profile: bool,
    keep: Path | None,
    model: str = "mlp",
    busy: int = 0,
) -> dict[str, Any]:
    started = time.perf_counter()
    # other processes, each spinning on one core for the whole benchmark: a loaded machine
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="aoti-bench-scale-", dir=keep))
        cleanup = None
    else:
        cleanup = tempfile.TemporaryDirectory(prefix="aoti-bench-scale-")
        work = Path(cleanup.name)
    try:
        shared = work / "shared"
        shared.mkdir()
        (shared / "scale_model.py").write_text(MODELS[model])
        (shared / "raw_scale.py").write_text(RAW_SOURCE)
        env = child_env(shared, work / "inductor-cache")

        log(f"warm-up (untimed): raw at width {min(widths)}, builds the precompiled headers")
        warm_up = run_raw(work / "warm-up", min(widths), device, shared, env)
        machine_cache = work / "machine-cache"
        run_plugin(
            "warm-up", work / "warm-up-plugin", WARM_UP_WIDTH, device, machine_cache, env, False
        )
        log(f"warm-up: {warm_up['wall_s']:.1f} s")

        runs: dict[int, list[dict[str, Any]]] = {width: [] for width in widths}
        for rep in range(1, reps + 1):
            for width in widths:
                base = work / f"w{width}" / f"rep{rep}"
                cache = base / "aoti-cache"
                # a cold program on a machine the cache knows: its compile target, found once,
                # and the C++ loader's runner, built once per torch build and compiler
                for known in ("machine", "cpp-loader"):
                    if (machine_cache / known).is_dir():
                        shutil.copytree(machine_cache / known, cache / known, symlinks=True)
                run: dict[str, Any] = {"raw": run_raw(base / "raw", width, device, shared, env)}
                for kind in ("cold", "warm"):
                    run[kind] = run_plugin(kind, base / kind, width, device, cache, env, profile)
                log(
                    f"rep {rep}/{reps}, width {width}: "
                    + ", ".join(
                        f"{kind} {run[kind]['wall_s']:.1f} s {run[kind]['tree_mb']:.0f} MB"
                        for kind in KINDS
                    )
                    + f"; other load {run['raw']['other_load_cores']}/"
                    f"{run['cold']['other_load_cores']}/{run['warm']['other_load_cores']} cores"
                )
                runs[width].append(run)
        result: dict[str, Any] = {
            "benchmark": "scale",
            "device": device,
            "model": model,
            "busy": busy,
            "layers": LAYERS if model == "mlp" else TRANSFORMER_LAYERS,
            "batch": BATCH if model == "mlp" else TRANSFORMER_BATCH,
            "reps": reps,
            "cprofile": profile,
            "widths": {
                str(width): {
                    "parameters": parameters(width, model),
                    "summary": summarize(runs[width]),
                    "runs": runs[width],
                }
                for width in widths
            },
            "warm_up": {key: warm_up[key] for key in ("wall_s", "parts")},
            "environment": {
                "python": platform.python_version(),
                "torch": warm_up["torch"],
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
            },
            "sampling": {"rss_s": SAMPLE_SECONDS, "pss_s": PSS_SECONDS},
            "kept": str(work) if keep is not None else None,
            "benchmark_wall_s": round(time.perf_counter() - started, 1),
        }
        if profile:
            print_profiles(runs)
        return result
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
        if cleanup is not None:
            cleanup.cleanup()


# -- output ----------------------------------------------------------------------------------


def _cell(spread: Mapping[str, Any] | None, digits: int) -> str:
    if spread is None:
        return "-"
    text = f"{spread['median']:.{digits}f}"
    if spread["min"] != spread["max"]:
        text += f" ({spread['min']:.{digits}f}-{spread['max']:.{digits}f})"
    return text


def _ratio_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def print_table(result: Mapping[str, Any]) -> None:
    """Per width: the figures of each kind (median, min-max), the ratios, the parts."""
    lines: list[str] = []
    rows = (
        ("wall s", "wall_s", 1),
        ("cpu s", "cpu_s", 1),
        ("outside check s", "outside_check_s", 1),
        ("tree MB", "tree_mb", 0),
        ("largest MB", "largest_mb", 0),
        ("tree PSS MB", "tree_pss_mb", 0),
        ("largest hwm MB", "largest_hwm_mb", 0),
        ("cuda max MB", "cuda_max_mb", 0),
        ("device tree MB", "gpu_tree_mb", 0),
    )
    for width, figures in result["widths"].items():
        summary = figures["summary"]
        lines.append("")
        lines.append(
            f"width {width} ({figures['parameters'] / 1e6:.1f}M parameters), "
            f"{result['reps']} rep(s), {result['device']}: median (min-max)"
        )
        lines.append(f"  {'':16}" + "".join(f"{kind:>24}" for kind in KINDS))
        for label, figure, digits in rows:
            cells = [_cell(summary[kind].get(figure), digits) for kind in KINDS]
            if any(cell != "-" for cell in cells):
                lines.append(f"  {label:16}" + "".join(f"{cell:>24}" for cell in cells))
        ratios, per_rep = summary["ratios"], summary["per_rep"]
        lines.append(
            "  ratios (of medians): "
            + ", ".join(
                f"{name.replace('_over_', '/')} {_ratio_text(value)}"
                for name, value in ratios.items()
                if value is not None
            )
        )
        lines.append(
            "  per rep: "
            + "; ".join(
                f"{name.replace('_over_', '/')} " + " ".join(_ratio_text(value) for value in values)
                for name, values in per_rep.items()
            )
        )
        for kind in ("cold", "warm"):
            searches = [run[kind].get("searches") for run in figures["runs"]]
            lines.append(
                f"  {kind} searches (ran, planned, left) per rep: "
                + "; ".join(
                    ", ".join(f"{name} {tuple(counts)}" for name, counts in (each or {}).items())
                    for each in searches
                )
            )
        for kind in KINDS:
            parts = summary[kind]["parts"]
            if parts:
                lines.append(f"  {kind} parts, median s:")
                lines.extend(
                    textwrap.wrap(
                        ", ".join(f"{name} {value:.3g}" for name, value in parts.items()),
                        width=96,
                        initial_indent="    ",
                        subsequent_indent="    ",
                    )
                )
    print("\n".join(lines), file=sys.stderr, flush=True)


def print_profiles(runs: Mapping[int, Sequence[Mapping[str, Mapping[str, Any]]]]) -> None:
    """The top cumulative entries of every profiled pytest process."""
    for width, width_runs in runs.items():
        for rep, run in enumerate(width_runs, 1):
            for kind in ("cold", "warm"):
                path = run[kind].get("cprofile")
                if path is None:
                    continue
                print(f"\n== cProfile: width {width}, rep {rep}, {kind} ==", file=sys.stderr)
                stats = pstats.Stats(path, stream=sys.stderr)
                stats.sort_stats("cumulative").print_stats(PROFILE_LINES)


def _widths(text: str) -> list[int]:
    try:
        widths = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not a comma list of integers: {text!r}") from error
    if not widths or min(widths) < 1:
        raise argparse.ArgumentTypeError(f"no positive widths in {text!r}")
    return widths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--widths",
        type=_widths,
        default=list(DEFAULT_WIDTHS),
        help="comma list of MLP widths (default 1472,2912,5824; 16384 is about 1.07B parameters)",
    )
    parser.add_argument("--reps", type=int, default=3, help="reps of raw, cold, warm (default 3)")
    parser.add_argument("--quick", action="store_true", help="width 1472 only, one rep")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--cprofile",
        action="store_true",
        help=f"cold and warm under cProfile; print the top {PROFILE_LINES} cumulative entries",
    )
    parser.add_argument(
        "--model",
        choices=sorted(MODELS),
        default="mlp",
        help="the 4-layer MLP at batch 8 (default), or a 2-layer transformer encoder at 2x16 tokens",
    )
    parser.add_argument(
        "--busy",
        type=int,
        default=0,
        metavar="N",
        help="N other processes each keep one core busy for the whole benchmark (default 0)",
    )
    parser.add_argument("--keep", type=Path, metavar="DIR", help="keep the work dirs under DIR")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the JSON line here")
    options = parser.parse_args(argv)
    widths, reps = ([1472], 1) if options.quick else (options.widths, options.reps)
    if reps < 1:
        parser.error("--reps must be at least 1")
    if options.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda: torch.cuda.is_available() is False here")

    result = benchmark(
        widths,
        reps,
        options.device,
        options.cprofile,
        options.keep,
        model=options.model,
        busy=options.busy,
    )
    print_table(result)
    line = json.dumps(result)
    print(line)
    if options.json is not None:
        options.json.write_text(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
