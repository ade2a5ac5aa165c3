"""An unseeded model recompiles every run: the summary says so, and what to do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_aoti.cache.history import SEED_ADVICE, KeyHistory
from pytest_aoti.reports.collector import ReportCollector

SEEDS = """
import torch


def test_unseeded(aoti):
    aoti.check(torch.nn.Linear(2, 2), (torch.ones(3, 2),))


def test_seeded(aoti):
    torch.manual_seed(0)
    aoti.check(torch.nn.Linear(2, 2), (torch.ones(3, 2),))
"""


@pytest.mark.compiles
def test_second_run_of_an_unseeded_model_says_to_seed_it(
    pytester: pytest.Pytester, shared_cache_dir: Path
) -> None:
    pytester.makepyfile(test_weights=SEEDS)
    args = ("--aoti-device=cpu", f"--aoti-cache-dir={shared_cache_dir}")
    first = pytester.runpytest(*args)
    first.assert_outcomes(passed=2)
    assert "weights differ" not in first.stdout.str()  # nothing to compare with yet

    second = pytester.runpytest(*args, "-p", "xdist", "-n", "1")
    second.assert_outcomes(passed=2)
    second.stdout.fnmatch_lines(
        [f"aoti: {SEED_ADVICE}:", "    test_weights.py::test_unseeded[[]cpu]"]
    )
    assert "test_seeded" not in second.stdout.str().split(SEED_ADVICE)[1]


def test_history_tells_weights_from_other_changes(tmp_path: Path) -> None:
    parts = {"graph": "g", "weights": "w1", "configs": "c", "device": "d", "torch": "t"}
    first = KeyHistory(tmp_path)
    assert not first.observe("t.py::a", 1, parts, compiled=True)
    assert not first.observe("t.py::a", 2, {**parts, "graph": "g2"}, compiled=True)
    [written] = list(tmp_path.glob("*.json"))
    assert json.loads(written.read_text())["test"] == "t.py::a"

    second = KeyHistory(tmp_path)
    assert second.observe("t.py::a", 1, {**parts, "weights": "w2"}, compiled=True)
    assert not second.observe("t.py::a", 2, {**parts, "graph": "g3", "weights": "w2"}, True)
    assert not second.observe("t.py::b", 1, {**parts, "weights": "w2"}, compiled=True)
    # loaded from the cache: nothing was compiled, nothing to say
    third = KeyHistory(tmp_path)
    assert not third.observe("t.py::a", 1, parts, compiled=False)


def test_workers_reseeded_tests_and_skipped_devices_reach_the_controller() -> None:
    worker = ReportCollector()
    worker.reseeded.append("t.py::a[cpu]")
    worker.skipped_devices["cuda"] = "aoti_device in the ini names cuda, but no GPU"
    payload = worker.payload(None, [])
    json.dumps(payload)  # plain data: what execnet carries

    controller = ReportCollector()
    controller.skipped_devices["cuda"] = "aoti_device in the ini names cuda, but no GPU"
    controller.merge(payload)
    controller.merge(payload)  # merged twice: each test and device is listed once
    assert controller.reseeded == ["t.py::a[cpu]"]
    assert controller.skipped_devices == {"cuda": "aoti_device in the ini names cuda, but no GPU"}
