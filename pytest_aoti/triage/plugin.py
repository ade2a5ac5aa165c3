"""Triage's hooks: what explains each failed check (the stage that broke it, the first
diverging node) and the repro bundle it leaves."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import torch

    from pytest_aoti.cache.registry import ProgramRegistry
    from pytest_aoti.checks.base import CheckPlan, Triage
    from pytest_aoti.compiling.program import AotiProgram
    from pytest_aoti.errors import AotiCheckError


@pytest.hookimpl(trylast=True)
def pytest_aoti_triage(
    program: AotiProgram,
    plan: CheckPlan,
    registry: ProgramRegistry,
    device: torch.device,
    label: str,
) -> Triage:
    """Stage attribution and, with ``localize``, the first diverging node (one
    instrumented compile, when a failure needs it)."""
    from pytest_aoti.triage.attribution import Attribution, compiling_localizer

    localizer = None
    if plan.options.localize:
        localizer = compiling_localizer(
            program,
            registry,
            device=device,
            tolerance=plan.tolerance,
            configs=dict(plan.inductor_configs),
            label=label,
        )
    return Attribution(localizer)


@pytest.hookimpl(trylast=True)
def pytest_aoti_failure_bundle(
    program: AotiProgram, error: AotiCheckError, bundle_dir: Callable[[], Path | None]
) -> str | None:
    """The repro bundle of a failure ``repro.py`` can reproduce, where one is asked for."""
    from pytest_aoti.triage.bundles import keep_bundle, worth_keeping

    if not worth_keeping(program, error):
        return None  # a failure that gets no bundle takes no bundle folder name
    directory = bundle_dir()
    return None if directory is None else keep_bundle(directory, program, error)
