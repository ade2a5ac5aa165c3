"""``scripts/gpu-check`` names tests by path, node id and ``-k`` expression: each step must still
select at least one test, or a renamed test would make its step pass on a GPU with nothing run.
Collected here on the CPU (no compile), every step in one pytest process (torch imported once)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
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


COLLECT_EVERY_STEP = """
import json, sys
import pytest

class Collected:
    def __init__(self):
        self.ids = []

    def pytest_collection_finish(self, session):
        self.ids = [item.nodeid for item in session.items]

found = {}
for name, chosen in json.loads(sys.argv[1]).items():
    collected = Collected()
    code = pytest.main(
        ["--collect-only", "-q", "-p", "no:cacheprovider", "--aoti-device=cpu", *chosen],
        plugins=[collected],
    )
    found[name] = [int(code), len(collected.ids)]
print("STEPS " + json.dumps(found))
"""


@pytest.fixture(scope="module")
def collected() -> dict[str, Any]:
    """Each step's exit status and number of collected tests, from one pytest process."""
    chosen = {name: selection(args) for name, args in STEPS.items()}
    timm = any(word.startswith("--aoti-model=timm:") for words in chosen.values() for word in words)
    if timm and not _importable("timm"):
        chosen = {n: w for n, w in chosen.items() if not any("timm:" in x for x in w)}
    # a golden: spec tests the records an earlier step writes: nothing to collect before it
    chosen = {n: w for n, w in chosen.items() if not any("=golden:" in x for x in w)}
    result = subprocess.run(
        [sys.executable, "-c", COLLECT_EVERY_STEP, json.dumps(chosen)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    line = next((x for x in result.stdout.splitlines() if x.startswith("STEPS ")), None)
    assert line is not None, (result.stdout[-2000:], result.stderr[-2000:])
    return {"found": json.loads(line.removeprefix("STEPS ")), "chosen": chosen}


def _importable(name: str) -> bool:
    from importlib.util import find_spec

    return find_spec(name) is not None


@pytest.mark.parametrize("name", sorted(STEPS))
def test_each_step_selects_a_test(name: str, collected: dict[str, Any]) -> None:
    if name not in collected["found"]:
        pytest.skip("timm is not installed, or its records are an earlier step's")
    code, count = collected["found"][name]
    assert code == 0 and count, (name, collected["chosen"][name])
