"""The one module a check or feature plugin imports: a :class:`Feature` to declare, the
:class:`Check` protocol, and the mechanisms the core's own checks use.
Importing it imports no torch: the names that need torch load on first use."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pytest_aoti.checks.base import (
    Check,
    CheckContext,
    CheckPlan,
    CheckResult,
    InputSet,
    Outcome,
    Phase,
    RecordPart,
    Triage,
)
from pytest_aoti.errors import (
    AotiBufferMutationWarning,
    AotiCheckError,
    AotiUsageError,
)
from pytest_aoti.findings import (
    BundleAdapter,
    Figures,
    Finding,
    FindingKind,
)
from pytest_aoti.options.feature import Feature
from pytest_aoti.options.fields import per_check, session_field
from pytest_aoti.options.option import Option
from pytest_aoti.options.parsers import ValueKind

if TYPE_CHECKING:
    from pytest_aoti.atomic_files import replace_text as replace_text
    from pytest_aoti.cache.registry import ProgramRegistry as ProgramRegistry
    from pytest_aoti.checks.crash_screen import CrashScreen as CrashScreen
    from pytest_aoti.checks.float64 import Float64Reference as Float64Reference
    from pytest_aoti.checks.parity import InputRun as InputRun
    from pytest_aoti.checks.refused import ExportedRefusals as ExportedRefusals
    from pytest_aoti.checks.replay import InputReplay as InputReplay
    from pytest_aoti.compare import Comparison as Comparison
    from pytest_aoti.compiling.program import AotiProgram as AotiProgram
    from pytest_aoti.isolation.line_child import LineChild as LineChild
    from pytest_aoti.mutation_maps import ProgramCall as ProgramCall
    from pytest_aoti.reports.collector import ReportCollector as ReportCollector
    from pytest_aoti.reports.records import CheckRecord as CheckRecord
    from pytest_aoti.session import session_of as session_of
    from pytest_aoti.shapes.generation import InputBuilder as InputBuilder
    from pytest_aoti.shapes.read import ProgramShapes as ProgramShapes
    from pytest_aoti.steps.chain import StepsRun as StepsRun
    from pytest_aoti.tester import AotiTester as AotiTester
    from pytest_aoti.tolerance import Tolerance as Tolerance

_LAZY: dict[str, str] = {  # names that load their module (and torch) on first use
    "ReportCollector": "pytest_aoti.reports.collector",
    "AotiProgram": "pytest_aoti.compiling.program",
    "AotiTester": "pytest_aoti.tester",
    "CheckRecord": "pytest_aoti.reports.records",
    "Comparison": "pytest_aoti.compare",
    "StepsRun": "pytest_aoti.steps.chain",
    "CrashScreen": "pytest_aoti.checks.crash_screen",
    "Float64Reference": "pytest_aoti.checks.float64",
    "InputBuilder": "pytest_aoti.shapes.generation",
    "InputReplay": "pytest_aoti.checks.replay",
    "InputRun": "pytest_aoti.checks.parity",
    "LineChild": "pytest_aoti.isolation.line_child",
    "ProgramRegistry": "pytest_aoti.cache.registry",
    "ProgramShapes": "pytest_aoti.shapes.read",
    "ProgramCall": "pytest_aoti.mutation_maps",
    "replace_text": "pytest_aoti.atomic_files",
    "session_of": "pytest_aoti.session",
    "Tolerance": "pytest_aoti.tolerance",
    "ExportedRefusals": "pytest_aoti.checks.refused",
}

__all__ = [
    "AotiBufferMutationWarning",
    "AotiCheckError",
    "AotiUsageError",
    "BundleAdapter",
    "Check",
    "CheckContext",
    "CheckPlan",
    "CheckResult",
    "Feature",
    "Figures",
    "Finding",
    "FindingKind",
    "InputSet",
    "Option",
    "Outcome",
    "Phase",
    "RecordPart",
    "Triage",
    "ValueKind",
    "per_check",
    "session_field",
    *_LAZY,
]


if not TYPE_CHECKING:  # mypy sees the names above, each typed, and no others

    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'pytest_aoti.api' has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)
