"""Correct programs from PyTorch's own AOTInductor tests pass the default check: no false
alarm where a draw changes what a data-dependent program takes (a bool mask's count of True
values: eager itself refuses it), where a Python float comes from ``.item()``, or where a
long float32 sum is added up in another order. ``benchmarks/bench_false_alarms.py`` runs
every ported program; these three run here."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import upstream_programs


@pytest.mark.compiles
def test_ported_programs_pass_the_default_check(
    run_aoti: Callable[..., pytest.RunResult], tmp_path: Path
) -> None:
    names = ("index_put_fallback", "dynamic_scalar", "long_reduction_sum_1496")
    report = tmp_path / "aoti.json"
    result = run_aoti(upstream_programs.check_source(names), f"--aoti-report={report}")
    result.assert_outcomes(passed=3)
    records = {r["test"].split("::")[-1]: r for r in json.loads(report.read_text())["checks"]}
    masks = records["test_upstream[cpu-index_put_fallback]"]
    assert masks["values"]["refused"] > 0  # draws of another count of True values
    assert any("refused by eager PyTorch itself" in note for note in masks["notes"])
    reduction = records["test_upstream[cpu-long_reduction_sum_1496]"]
    assert reduction["values"]["checked"] == reduction["values"]["draws"]
