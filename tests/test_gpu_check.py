"""``scripts/gpu-check`` names tests by path, node id and ``-k`` expression: each step must still
select at least one test, or a renamed test would make its step pass on a GPU with nothing run.
Collected here on the CPU (no compile), one pytest process per step."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu-check"


def steps() -> dict[str, list[str]]:
    """Each ``run_step NAME CAP ARGS...`` of the script: its name and pytest arguments, with
    the script's plain variable assignments (``fleet_test=...``) filled in."""
    text = SCRIPT.read_text(encoding="utf-8").replace("\\\n", " ")
    assigned = dict(re.findall(r"^\s*(\w+)=([^\s$(]+)\s*$", text, re.MULTILINE))
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        words = shlex.split(line.split("#", 1)[0]) if "run_step " in line else []
        if "run_step" not in words or words[-1] == "{":
            continue
        name, _cap, *args = words[words.index("run_step") + 1 :]
        args = [re.sub(r"\$(\w+)", lambda m: assigned.get(m[1], m[0]), arg) for arg in args]
        found[name.replace("$machine", "A")] = args
    return found


def selection(args: list[str]) -> list[str]:
    """What selects tests among a step's arguments: paths and node ids, ``-k`` and its
    expression, ``--aoti-model`` specs; the device and report options are left out (this
    machine may have no GPU)."""
    kept: list[str] = []
    words = iter(args)
    for word in words:
        if word == "-k":
            kept += [word, next(words)]
        elif word.startswith("--aoti-model=") or not word.startswith("-"):
            kept.append(word)
    return kept


STEPS = steps()


def test_the_script_names_its_steps() -> None:
    assert {"examples-cuda", "repro-cuda", "probes-cuda", "timm-cuda", "examples-cpu"} <= set(STEPS)


@pytest.mark.parametrize("name", sorted(STEPS))
def test_each_step_selects_a_test(name: str) -> None:
    chosen = selection(STEPS[name])
    if any(word.startswith("--aoti-model=timm:") for word in chosen):
        pytest.importorskip("timm")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
        + ["--aoti-device=cpu", *chosen],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    collected = [line for line in result.stdout.splitlines() if "::" in line]
    assert result.returncode == 0 and collected, (name, chosen, result.stdout[-2000:])
