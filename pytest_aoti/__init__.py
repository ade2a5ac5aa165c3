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
from pytest_aoti.tester import AotiTester, CheckDefaults, CheckResult

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
