"""Hooks other plugins and ``conftest.py`` files can implement to extend pytest-aoti."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import torch

    from pytest_aoti.cache.registry import ProgramRegistry
    from pytest_aoti.checks.base import Check, CheckPlan, Triage
    from pytest_aoti.compiling.program import AotiProgram
    from pytest_aoti.errors import AotiCheckError
    from pytest_aoti.reports.records import CheckRecord
    from pytest_aoti.tester import CheckResult


@pytest.hookspec
def pytest_aoti_inductor_configs(
    config: pytest.Config, device: torch.device, item: pytest.Item
) -> Mapping[str, Any] | None:
    """Return inductor options the AOTI compiles of test ``item`` on ``device`` start from.

    Results of all implementations are merged (closer conftests win) over the ini file's
    ``aoti_inductor_configs``; the marker's and the call's ``inductor_configs`` override
    them. They are part of the program's cache key.

    Example, in ``conftest.py``: a cheaper wrapper build on CPU, and max-autotune for the
    tests under ``tests/perf/``::

        def pytest_aoti_inductor_configs(config, device, item):
            configs = {}
            if device.type == "cpu":
                configs["aot_inductor.compile_wrapper_opt_level"] = "O0"
            if "tests/perf/" in item.nodeid:
                configs["max_autotune"] = True
            return configs
    """


@pytest.hookspec(firstresult=True)
def pytest_aoti_tolerance(
    item: pytest.Item, path: str, dtype: torch.dtype, device: torch.device
) -> tuple[float, float] | None:
    """Return ``(rtol, atol)`` for one compared leaf, or None to leave it to the defaults.

    ``path`` names the leaf as reports do: ``output[0]``, ``output['logits']``,
    ``input 'cache'``. The first implementation that returns a pair decides. Precedence:
    the call's ``rtol``/``atol``, then the marker's, then this hook, then
    ``--aoti-rtol``/``--aoti-atol``, then the dtype's defaults. A tolerance from this hook
    is final: no fp64 check relaxes it.

    Example, in ``conftest.py``: half-precision models get a looser tolerance::

        def pytest_aoti_tolerance(item, path, dtype, device):
            if dtype in (torch.float16, torch.bfloat16):
                return (2e-2, 2e-2)
            return None
    """


@pytest.hookspec
def pytest_aoti_export_options(item: pytest.Item) -> Mapping[str, Any] | None:
    """Return ``torch.export.export`` keyword arguments for the AOTI tests of ``item``.

    Results of all implementations are merged (closer conftests win); the
    ``--aoti-export`` variant, the marker's and the call's ``strict`` override them.

    Example, in ``conftest.py``: strict export for one directory, and runtime asserts
    deferred to the engine instead of guards everywhere::

        def pytest_aoti_export_options(item):
            options = {"prefer_deferred_runtime_asserts_over_guards": True}
            if "tests/strict/" in item.nodeid:
                options["strict"] = True
            return options
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


@pytest.hookspec
def pytest_aoti_checks(config: pytest.Config) -> Sequence[Check] | None:
    """Return checks to run inside every ``aoti.check`` of the session, beside the built-in
    ones; called once per session, at the first check, when every conftest is loaded (their results, in conftest
    order).

    A check is any object with ``name`` (unique: no built-in check's, no other added
    check's), ``phase`` (``"eager"``: before anything is compiled; ``"exported"``: the
    exported program, ``context.exported``; ``"engine"``: the compiled program,
    ``context.program`` and ``context.engine()``), ``applies(plan, context)`` and
    ``run(plan, context)``; see :class:`pytest_aoti.Check`. It runs after the built-in
    checks of its phase, so an engine check reads what timing measured in
    ``context.figures``. It returns a :class:`pytest_aoti.Outcome`, whose ``figures``
    appear in ``CheckResult.figures`` under their own names (a name a built-in check uses
    is a usage error), in the JSON record under ``check_figures[<name>]`` and in JUnit as
    ``aoti_<name>_<figure>``; or it raises :class:`pytest_aoti.AotiCheckError`, which fails
    the test with its message as the first line and the check's name in the record
    (``finding.check``). ``context.item`` is the test item, for its markers.

    Example, in ``conftest.py``: a latency budget on the engine, from a marker::

        from pytest_aoti import AotiCheckError, Outcome

        class LatencyBudget:
            name, phase = "latency", "engine"

            def applies(self, plan, context):
                return context.item is not None and context.item.get_closest_marker("budget")

            def run(self, plan, context):
                budget = context.item.get_closest_marker("budget").args[0]
                seconds = context.figures.get("engine_seconds")
                if seconds is not None and seconds > budget:
                    raise AotiCheckError(f"engine call took {seconds:.4f} s, over {budget} s")
                return Outcome(figures={"latency_budget": budget})

        def pytest_aoti_checks(config):
            return [LatencyBudget()]
    """


@pytest.hookspec
def pytest_aoti_terminal_summary(
    terminalreporter: Any, config: pytest.Config, records: Sequence[CheckRecord]
) -> None:
    """Write a section of pytest-aoti's terminal summary, from the session's check records.

    Called once, at the end of the run (on the xdist controller, with every worker's
    records), after the table of the slowest checks and before the cache problems and
    notes: the plugin's own features' sections first (deployment hazards), then the other
    plugins' and conftests' in conftest order. ``records`` are
    :class:`~pytest_aoti.reports.records.CheckRecord` objects, one per ``aoti.check``:
    their declared fields, and ``other_fields`` for the fields a check added
    (``check_figures`` for those of a ``pytest_aoti_checks`` check).

    Example, in ``conftest.py``: one line for the checks over a latency budget::

        def pytest_aoti_terminal_summary(terminalreporter, config, records):
            slow = [r.label for r in records if (r.engine_seconds or 0) > 0.01]
            if slow:
                terminalreporter.write_sep("-", "aoti: over 10 ms per engine call")
                for label in slow:
                    terminalreporter.write_line(label)
    """


@pytest.hookspec(firstresult=True)
def pytest_aoti_triage(
    program: AotiProgram,
    plan: CheckPlan,
    registry: ProgramRegistry,
    device: torch.device,
    label: str,
) -> Triage | None:
    """Return what explains the failed input sets of one ``aoti.check`` of ``program``: a
    :class:`~pytest_aoti.checks.base.Triage` (its ``explain`` names the stage that
    introduced a difference and the first diverging node; its ``replayed`` keeps the input
    set for the repro bundle). The first result counts; the plugin's own triage answers
    last. None: failures are not explained (no stage, no node, no bundle)."""


@pytest.hookspec(firstresult=True)
def pytest_aoti_failure_bundle(
    program: AotiProgram, error: AotiCheckError, bundle_dir: Callable[[], Path | None]
) -> str | None:
    """Keep what reproduces failure ``error`` of ``program``; return the line the failure
    shows about it, or None. ``bundle_dir()`` gives the next folder of the test's bundles
    (``--aoti-keep-failed``), None where none is kept; call it only for a failure that
    gets a bundle. The first result counts; the plugin's own triage answers last."""
