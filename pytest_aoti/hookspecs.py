"""Hooks other plugins and ``conftest.py`` files can implement to extend pytest-aoti."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import argparse

    import torch

    from pytest_aoti.cache.registry import ProgramRegistry, RemoteCache
    from pytest_aoti.checks.base import Check, CheckPlan, CheckResult, Triage
    from pytest_aoti.compiling.program import AotiProgram
    from pytest_aoti.errors import AotiCheckError
    from pytest_aoti.options.feature import Feature
    from pytest_aoti.reports.records import CheckRecord


@pytest.hookspec
def pytest_aoti_inductor_configs(
    config: pytest.Config, device: torch.device, item: pytest.Item
) -> Mapping[str, Any] | None:
    """Return inductor options for the AOTI compiles of ``item`` on ``device``.

    Merged (closer conftests win) over the ini's ``aoti_inductor_configs``, below the
    marker's and the call's ``inductor_configs``; part of the program's cache key.

    Example, in ``conftest.py``: a cheap wrapper build on CPU, max-autotune in ``tests/perf/``::

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

    ``path`` names the leaf (``output[0]``, ``input 'cache'``); the first pair decides.
    Precedence: the call's ``rtol``/``atol``, the marker's, this hook, the options
    ``--aoti-rtol``/``--aoti-atol``, the dtype's defaults. No fp64 check relaxes this hook's.

    Example, in ``conftest.py``: half-precision models get a looser tolerance::

        def pytest_aoti_tolerance(item, path, dtype, device):
            if dtype in (torch.float16, torch.bfloat16):
                return (2e-2, 2e-2)
            return None
    """


@pytest.hookspec
def pytest_aoti_export_options(item: pytest.Item) -> Mapping[str, Any] | None:
    """Return ``torch.export.export`` keyword arguments for the AOTI tests of ``item``.

    Merged (closer conftests win), below ``--aoti-export`` and the marker's and call's ``strict``.

    Example, in ``conftest.py``: strict export in one directory, deferred asserts everywhere::

        def pytest_aoti_export_options(item):
            options = {"prefer_deferred_runtime_asserts_over_guards": True}
            if "tests/strict/" in item.nodeid:
                options["strict"] = True
            return options
    """


@pytest.hookspec
def pytest_aoti_program_ready(config: pytest.Config, program: AotiProgram) -> None:
    """Called once per distinct program and session, compiled or loaded, before its first use.

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
def pytest_aoti_feature() -> Feature | None:
    """Declare a feature plugin's options, record fields and JUnit properties (a
    :class:`pytest_aoti.api.Feature`); ``-p no:NAME`` leaves a plugin's out.

    Example, in a plugin module: a ``latency_budget`` keyword, marker key and
    ``--aoti-latency-budget`` option, read as ``plan.options.of(LatencyOptions)``::

        from dataclasses import dataclass
        from pytest_aoti.api import Feature, per_check

        @dataclass(frozen=True)
        class LatencyOptions:
            latency_budget: float | None = per_check(
                None, "Seconds one engine call may take.", parse=float,
                marker=True, keyword=True)

        FEATURE = Feature("latency", "A latency budget", options=LatencyOptions)

        def pytest_aoti_feature():
            return FEATURE

        def pytest_addoption(parser):
            FEATURE.add_options(parser)
    """


@pytest.hookspec
def pytest_aoti_checks(config: pytest.Config) -> Sequence[Check] | None:
    """Return checks to run in every ``aoti.check``, each after the core checks of its phase;
    called once, at the first check (the default plugins' first, then the others' in
    conftest order, then a default plugin's ``trylast`` ones: precision's).

    A check (:class:`pytest_aoti.Check`) has a unique ``name``, a ``phase`` (``"eager"``,
    ``"exported"``: ``context.exported``, ``"engine"``: ``context.engine()`` and the figures
    so far), ``applies(plan, context)`` and ``run(plan, context)``. Its
    :class:`pytest_aoti.Outcome`'s ``figures`` show in ``CheckResult.figures`` (a built-in
    figure's name is a usage error), the JSON record's ``check_figures[<name>]`` and JUnit's
    ``aoti_<name>_<figure>``; a :class:`pytest_aoti.AotiCheckError` it raises fails the
    test, naming the check in ``finding.check``. ``context.item`` is the test item.

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

    Called once at the end (on the xdist controller, with every worker's records), after
    the slowest checks: the default plugins' sections first, in their list's order, then
    the other plugins' and conftests' in registration order. ``records``: a
    :class:`~pytest_aoti.reports.records.CheckRecord` per
    ``aoti.check`` (``other_fields``: the fields checks added, ``check_figures``).

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
    """Return a :class:`~pytest_aoti.checks.base.Triage` that explains the failed input
    sets of one ``aoti.check`` (stage, diverging node, replay for the bundle), or None. The
    first result counts; the plugin's own triage answers last."""


@pytest.hookspec(firstresult=True)
def pytest_aoti_failure_bundle(
    program: AotiProgram,
    error: AotiCheckError,
    bundle_dir: Callable[[], Path | None],
    features: Sequence[Feature],
) -> str | None:
    """Keep what reproduces ``error``; return the line the failure shows about it, or None.
    ``bundle_dir()`` gives the test's next bundle folder (None: none is kept); call it only
    for a failure that gets one. ``features``: the run's features (a finding of a feature's
    kind is reproduced as its ``bundle`` says). The first result counts; the plugin's own
    answers last."""


@pytest.hookspec(firstresult=True)
def pytest_aoti_remote_store(
    config: pytest.Config, on_problem: Callable[[str], None]
) -> RemoteCache | None:
    """Open the store behind the local cache shared with other machines (the fleet
    plugin's ``--aoti-cache-url``), or None. Called once per process at session start (a
    failure is a usage error); ``on_problem`` hears each problem the store works around."""


@pytest.hookspec
def pytest_aoti_figures(config: pytest.Config) -> Mapping[str, Any] | None:
    """This process's figures of a plugin by name (``{"remote": {...}}``), for
    :func:`pytest_aoti_totals` and :func:`pytest_aoti_summary_lines` (xdist: sent along)."""


@pytest.hookspec
def pytest_aoti_totals(
    config: pytest.Config, figures: Sequence[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """Fields for the JSON report's ``totals``, from every process's :func:`pytest_aoti_figures`."""


@pytest.hookspec
def pytest_aoti_header_lines(config: pytest.Config) -> Sequence[str] | None:
    """Lines a plugin adds to pytest-aoti's lines of the session header."""


@pytest.hookspec
def pytest_aoti_summary_lines(
    config: pytest.Config, figures: Sequence[Mapping[str, Any]]
) -> Sequence[str] | None:
    """Lines for the very end of the summary (shown under ``-q`` too), from every
    process's :func:`pytest_aoti_figures`."""


@pytest.hookspec
def pytest_aoti_commands(commands: argparse._SubParsersAction[Any]) -> None:
    """Add ``python -m pytest_aoti`` commands: ``commands.add_parser(NAME, ...)`` with
    ``set_defaults(run=FUNCTION)``, a function of the parsed arguments returning the exit status."""


@pytest.hookspec
def pytest_aoti_model_prefixes(config: pytest.Config) -> Mapping[str, Callable[..., Any]] | None:
    """Return ``--aoti-model`` spec prefixes this plugin adds, each with its resolver.

    A resolver takes the spec's text and the rootdir and returns the spec's tests as a list of
    ``(test id, fn)``, where ``fn(aoti)`` is the test, given the ``aoti`` fixture; or raises
    ``pytest.UsageError`` naming the spec. The golden plugin adds ``golden:DIR`` this way.
    """
