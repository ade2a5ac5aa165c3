"""Triage's hooks: what explains each failed check (the stage that broke it, the first
diverging node) and the repro bundle it leaves."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_aoti.triage.feature import TRIAGE, TriageOptions

if TYPE_CHECKING:
    import torch

    from pytest_aoti.api import (
        AotiCheckError,
        AotiProgram,
        CheckPlan,
        Feature,
        ProgramRegistry,
        Triage,
    )


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
    from pytest_aoti.triage.attribution import Attribution, compiling_localizer  # imports torch

    localizer = None
    if plan.options.of(TriageOptions).localize:
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
    program: AotiProgram,
    error: AotiCheckError,
    bundle_dir: Callable[[], Path | None],
    features: Sequence[Feature],
) -> str | None:
    """The repro bundle of a failure ``repro.py`` can reproduce, where one is asked for (a
    feature's kind of failure as its ``bundle`` adapter says)."""
    from pytest_aoti.triage.bundles import (  # imports torch
        bundle_adapters,
        keep_bundle,
        worth_keeping,
    )

    adapters = bundle_adapters(features)
    if not worth_keeping(program, error, adapters):
        return None  # a failure that gets no bundle takes no bundle folder name
    directory = bundle_dir()
    return None if directory is None else keep_bundle(directory, program, error, adapters)


@pytest.hookimpl  # also read outside a run, by a plain plugin manager
def pytest_aoti_feature() -> Feature:
    return TRIAGE


def pytest_addoption(parser: pytest.Parser) -> None:
    TRIAGE.add_options(parser)
