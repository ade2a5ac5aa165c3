"""pytest-aoti: test that PyTorch models compile to correct AOTInductor engines.
Importing this package does not import torch; torch loads when an AOTI test first runs."""

from __future__ import annotations

from pytest_aoti.checks.base import Check, CheckContext, CheckPlan, Outcome
from pytest_aoti.compiling.program import AotiProgram
from pytest_aoti.errors import (
    AotiBufferMutationWarning,
    AotiCacheWarning,
    AotiCheckError,
    AotiCompileError,
    AotiError,
    AotiExportError,
    AotiInputError,
    AotiUsageError,
)
from pytest_aoti.options.catalog import set_default
from pytest_aoti.plugins import default_checks, default_features
from pytest_aoti.run import added
from pytest_aoti.tester import AotiTester, CheckDefaults, CheckResult

set_default(default_features)  # the options outside a run: every default plugin's
added.set_default(default_checks)  # and the checks of a tester made without the fixture

__all__ = [
    "AotiBufferMutationWarning",
    "AotiCacheWarning",
    "AotiCheckError",
    "AotiCompileError",
    "AotiError",
    "AotiExportError",
    "AotiInputError",
    "AotiProgram",
    "AotiTester",
    "AotiUsageError",
    "Check",
    "CheckContext",
    "CheckDefaults",
    "CheckPlan",
    "CheckResult",
    "Outcome",
]
