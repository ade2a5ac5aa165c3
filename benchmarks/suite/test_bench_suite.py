"""A compile-bound example suite: one ``aoti.check`` (one AOTI compile) per benchmark model.

Run by ``benchmarks/bench_cache.py`` for its cold, warm and ``-n 0``/``-n 2`` measurements;
also runs on its own: ``pytest benchmarks/suite``.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import models
import pytest

# from the submodule: works even where a stale editable install makes ``pytest_aoti`` a
# namespace package (only its submodules importable)
from pytest_aoti.errors import AotiBufferMutationWarning

if TYPE_CHECKING:
    from pytest_aoti.tester import AotiTester


@pytest.mark.parametrize("name", models.selected_models())
def test_check(
    aoti: AotiTester, name: str, record_check: Callable[[str, float, float, Any], None]
) -> None:
    spec = models.MODELS[name]
    module, args = spec.make()
    options = spec.check_options()
    with warnings.catch_warnings():
        # expected for the buffer-mutating model: its engine is not thread-safe, by design
        warnings.simplefilter("ignore", AotiBufferMutationWarning)
        started, cpu_started = time.perf_counter(), models.cpu_seconds()
        result = aoti.check(module, args, **options)
        seconds, cpu = time.perf_counter() - started, models.cpu_seconds() - cpu_started
    record_check(name, seconds, cpu, result)
