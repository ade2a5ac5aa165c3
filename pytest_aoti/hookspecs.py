"""Hooks other plugins and ``conftest.py`` files can implement to extend pytest-aoti."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import torch

    from pytest_aoti.program import AotiProgram
    from pytest_aoti.tester import CheckResult


@pytest.hookspec
def pytest_aoti_inductor_configs(
    config: pytest.Config, device: torch.device
) -> Mapping[str, Any] | None:
    """Return inductor options every AOTI compile on ``device`` starts from.

    Results of all implementations are merged (later plugins win); the marker's and the
    call's ``inductor_configs`` override them. They are part of the program's cache key.

    Example, in ``conftest.py``::

        def pytest_aoti_inductor_configs(config, device):
            if device.type == "cpu":
                return {"aot_inductor.compile_wrapper_opt_level": "O0"}
            return None
    """


@pytest.hookspec
def pytest_aoti_program_ready(config: pytest.Config, program: AotiProgram) -> None:
    """Called once per distinct program and session, after it was compiled or loaded from
    the artifact cache and before any test uses it.

    Example: keep every package CI built, for deployment smoke tests::

        def pytest_aoti_program_ready(config, program):
            shutil.copy(program.package_path, ARTIFACTS / f"{program.key}.pt2")
    """


@pytest.hookspec
def pytest_aoti_check_done(item: pytest.Item, result: CheckResult) -> None:
    """Called after ``aoti.check`` passed, with the figures it measured.

    Example: fail a test whose engine is much less accurate than a budget::

        def pytest_aoti_check_done(item, result):
            if result.max_abs > 1e-3:
                raise AssertionError(f"{item.nodeid}: max abs error {result.max_abs:.2e}")
    """
