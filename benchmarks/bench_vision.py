"""Benchmark: ``timm:`` and ``torchvision:`` specs through the plugin, as Markdown table rows.

    python benchmarks/bench_vision.py [--cache DIR] [--only SPEC ...] [--json PATH]

Needs timm and torchvision (``tox -e newest`` installs both); run once by hand, not by CI.
Each spec runs in its own ``pytest --aoti-model=SPEC --aoti-device=cpu`` process in an
empty directory, with ``--aoti-cache-dir`` a persistent directory (a rerun loads what an
earlier run compiled; its compile column then shows the original compile's seconds) and a
JSON report it reads back: the result, the compile's seconds and the deployment probes'
hazards (which input layouts the engine gets wrong, and whether ``AOTI_RUNTIME_CHECK_INPUTS=1``
refuses them). The input and its size rule come from ``--aoti-models-list``. For a failure
the row names the stage and the line, and a second process runs the raw torch pipeline on
the same model and inputs (export, run_decompositions, aoti_compile_and_package,
aoti_load_package, one call) to say whether torch alone fails too, and where.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TIMM = (
    "resnet18",
    "resnet10t",
    "mobilenetv3_small_050",
    "efficientnet_b0",
    "ghostnet_050",
    "regnetx_002",
    "convnext_atto",
    "edgenext_xx_small",
    "repvit_m0_9",
    "fastvit_t8",
    "mobilevit_xxs",
    "vit_tiny_patch16_224",
    "deit_tiny_patch16_224",
    "swin_tiny_patch4_window7_224",
    "levit_128s",
    "efficientformer_l1",
)
TORCHVISION = (
    "resnet18",
    "mobilenet_v3_small",
    "shufflenet_v2_x0_5",
    "squeezenet1_1",
    "efficientnet_b0",
    "vit_b_16",
    "lraspp_mobilenet_v3_large",
    "r3d_18",
    "fasterrcnn_mobilenet_v3_large_320_fpn",
)
SPECS = tuple(f"timm:{name}" for name in TIMM) + tuple(f"torchvision:{n}" for n in TORCHVISION)

RAW_PIPELINE = """
import sys, torch
from pathlib import Path
from pytest_aoti.models.collect import resolve_specs
from pytest_aoti.models.factories import call_factory
spec = resolve_specs([sys.argv[1]], Path.cwd(), Path.cwd())[0]
case = call_factory(spec.factory, torch.device("cpu"), spec.text)
stage = "export"
try:
    ep = torch.export.export(case.module, case.args, case.kwargs,
                             dynamic_shapes=case.check.get("dynamic_shapes"))
    stage = "run_decompositions"
    ep = ep.run_decompositions()
    stage = "aoti_compile_and_package"
    path = torch._inductor.aoti_compile_and_package(ep, package_path=sys.argv[2])
    stage = "aoti_load_package"
    engine = torch._inductor.aoti_load_package(path)
    stage = "call"
    engine(*case.args, **case.kwargs)
except Exception as error:
    print(f"RAW {stage}: {type(error).__name__}: {str(error).splitlines()[0][:160]}")
else:
    print("RAW passes")
"""


def listed(specs: list[str]) -> dict[str, str]:
    """``--aoti-models-list``'s line per spec id: class, inputs and the size rule."""
    with tempfile.TemporaryDirectory() as empty:
        command = [sys.executable, "-m", "pytest", "--aoti-models-list", "-p", "no:cacheprovider"]
        command += [f"--aoti-model={spec}" for spec in specs]
        out = subprocess.run(command, cwd=empty, capture_output=True, text=True).stdout
    lines = {}
    for line in out.splitlines():
        head, sep, rest = line.partition(": ")
        if sep and head.split(":", 1)[0] in ("timm", "torchvision"):
            lines[head] = rest
    return lines


def hazards(probes: list[dict[str, Any]]) -> str:
    """``channels_last, permuted, strided: wrong, refused with input checks``, from the
    probes of one check (variants grouped by what the engine does with them)."""
    groups: dict[str, list[str]] = {}
    for probe in probes:
        outcome = probe.get("outcome", "?")
        if outcome in ("passed", "same", "ok", "refused"):
            continue
        refused = probe.get("refused_with_checks")
        how = outcome + (", refused with input checks" if refused else "")
        groups.setdefault(how, []).append(str(probe.get("variant", "?")))
    if not probes:
        return "no probes"
    if not groups:
        return "none"
    return "; ".join(f"{', '.join(variants)}: {how}" for how, variants in groups.items())


def run_spec(spec: str, cache: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as empty:
        report = Path(empty) / "aoti.json"
        command = [
            sys.executable,
            "-m",
            "pytest",
            f"--aoti-model={spec}",
            "--aoti-device=cpu",
            f"--aoti-cache-dir={cache}",
            f"--aoti-report={report}",
            "--aoti-examples=4",
            "-p",
            "no:cacheprovider",
            "-q",
        ]
        start = time.perf_counter()
        done = subprocess.run(command, cwd=empty, capture_output=True, text=True)
        wall = time.perf_counter() - start
        data = json.loads(report.read_text()) if report.exists() else {}
    checks = data.get("checks", [])
    row: dict[str, Any] = {"spec": spec, "wall": round(wall, 1), "exit": done.returncode}
    if not checks:
        row["result"] = "no check ran: " + (done.stdout.strip().splitlines() or ["?"])[-1]
        return row
    check = checks[0]
    compile_seconds = check.get("compile_seconds") or check.get("original_compile_seconds")
    row["compile"] = round(float(compile_seconds or 0.0), 1)
    row["result"] = check.get("outcome")
    row["hazards"] = hazards(check.get("probes") or [])
    finding = check.get("finding") or {}
    if row["result"] != "passed":
        row["stage"] = finding.get("stage")
        row["location"] = finding.get("location") or where(done.stdout)
        row["message"] = str(finding.get("message", "")).splitlines()[0][:200]
        row["raw"] = raw_pipeline(spec)
    return row


def where(output: str) -> str | None:
    """The failure's line as the plugin's text names it (``at path:LINE in function``),
    shortened to the path inside site-packages."""
    for line in output.splitlines():
        match = re.match(r"\s+at (\S+:\d+) in (\S+)", line)
        if match:
            return f"{match.group(1).split('site-packages/')[-1]} in {match.group(2)}"
    return None


def raw_pipeline(spec: str) -> str:
    with tempfile.TemporaryDirectory() as empty:
        done = subprocess.run(
            [sys.executable, "-c", RAW_PIPELINE, spec, str(Path(empty) / "raw.pt2")],
            cwd=empty,
            capture_output=True,
            text=True,
        )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RAW ")]
    return lines[-1][4:] if lines else f"crashed: {done.stderr.strip()[-200:]}"


def markdown(row: dict[str, Any], listing: dict[str, str]) -> str:
    from pytest_aoti.models.model_spec import clean_id

    line = listing.get(clean_id(row["spec"]), "")
    built, _, rule = line.partition("; input: ")
    result = "passes" if row.get("result") == "passed" else f"fails: {row.get('result')}"
    if row.get("result") == "failed":
        result = (
            f"fails in {row.get('stage')} at `{row.get('location')}`: {row.get('message')}; "
            f"raw torch: {row.get('raw')}"
        )
    compile_cell = f"{row['compile']} s" if "compile" in row else "-"
    return (
        f"| `{row['spec']}` | `{built}` | {rule} | {result} | {compile_cell} | "
        f"{row.get('hazards', '-')} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=Path(".bench-vision-cache"))
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--json", type=Path, default=None)
    options = parser.parse_args()
    specs = list(options.only or SPECS)
    cache = options.cache.resolve()
    listing = listed(specs)
    rows = []
    for spec in specs:
        row = run_spec(spec, cache)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("| spec | class built | input | result | compile | hazards |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(markdown(row, listing))
    if options.json:
        options.json.write_text(json.dumps({"rows": rows, "listing": listing}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
