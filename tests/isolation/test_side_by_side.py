"""Whether the engine child runs its calls beside this process's: only where the cores this
process may use hold both processes' torch threads."""

from __future__ import annotations

import os

import pytest
import torch

from pytest_aoti.isolation import process


@pytest.mark.parametrize(
    ("cores", "threads", "beside"),
    [(2, 1, True), (2, 2, False), (16, 8, True), (16, 9, False), (1, 1, False)],
)
def test_the_child_runs_beside_only_where_the_cores_hold_both_processes_threads(
    monkeypatch: pytest.MonkeyPatch, cores: int, threads: int, beside: bool
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    assert process.side_by_side() is beside
