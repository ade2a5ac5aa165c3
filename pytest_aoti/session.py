"""Per-session state: settings, resolved devices, the stores, the report collector.

Registered as the ``aoti-session`` plugin, so its hook methods run like any plugin's; each
is glue that hands the work to the part that owns it: the stores' lifecycle to
:class:`~pytest_aoti.cache.run_stores.RunStores`, records and every view of them to
:mod:`pytest_aoti.reports`. Heavy parts (torch, the registry, the store) are created on
first use: a run without AOTI tests never imports torch.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_aoti.cache.run_stores import RunStores
from pytest_aoti.options.settings import AotiSettings
from pytest_aoti.reports.artifacts import ArtifactPaths
from pytest_aoti.reports.collector import ReportCollector
from pytest_aoti.reports.progress import CompileProgress, write_own_line

if TYPE_CHECKING:
    import torch

    from pytest_aoti.checks.base import Check
    from pytest_aoti.compiling.program import AotiProgram
    from pytest_aoti.options.defaults import CheckDefaults
    from pytest_aoti.reports.events import ItemEvents


SESSION_PLUGIN = "aoti-session"
"""The name the session's state is registered under, as a plugin."""


class AotiSession:
    """State shared by every AOTI test of one pytest process."""

    def __init__(self, config: pytest.Config, settings: AotiSettings) -> None:
        self.config = config
        self.settings = settings
        self._devices: tuple[str, ...] | None = None
        self._progress: CompileProgress | None = None
        self.collector = ReportCollector()
        """Records and figures of this process (and, on the xdist controller, the workers')."""
        self.stores = RunStores(
            config,
            settings,
            on_problem=self.collector.cache_problem,
            problems=self.collector.cache_problems,
            watcher=lambda: self.progress,
            on_ready=self._program_ready,
        )
        """The local store, the remote store and the registry of this process."""
        self.artifacts = ArtifactPaths(settings.keep_failed, settings.profile)
        """Where each test's repro bundles and engine traces go."""
        self.warned_programs: set[str] = set()
        """Programs whose buffer mutation was warned about: once per session."""
        self._added_checks: tuple[Check, ...] | None = None

    @property
    def worker(self) -> str:
        """This process's xdist worker id (``gw0``); empty without xdist or on the controller."""
        return str(getattr(self.config, "workerinput", {}).get("workerid", ""))

    @property
    def devices(self) -> tuple[str, ...]:
        """``--aoti-device`` with ``auto`` resolved; imports torch on first use. A device of
        the ini file's list this machine lacks is left out (see :attr:`skipped_devices`)."""
        if self._devices is None:
            from pytest_aoti.devices import devices_from_ini, resolve_devices, resolve_ini_devices

            if devices_from_ini(self.config):
                self._devices, skipped = resolve_ini_devices(self.settings.devices)
                self.skipped_devices.update(skipped)
            else:
                # quoted as written: "cpu,cuda", not the one device at fault
                given = ",".join(self.settings.devices)
                self._devices = resolve_devices(self.settings.devices, given)
        return self._devices

    @property
    def skipped_devices(self) -> dict[str, str]:
        """Devices of the ini's list this machine lacks, with why: their test ids are
        skipped."""
        return self.collector.skipped_devices

    def torch_device(self, name: str) -> torch.device:
        """The ``torch.device`` of a device name of the run. A bare ``cuda`` on xdist worker
        ``gwI`` is ``cuda:(I mod GPUs)``: one GPU per worker, while test ids stay ``[cuda]``
        on every worker (xdist needs identical collections)."""
        import torch

        worker = self.worker
        if name == "cuda" and worker.startswith("gw") and worker[2:].isdigit():
            count = torch.cuda.device_count()
            if count > 1:
                return torch.device("cuda", int(worker[2:]) % count)
        return torch.device(name)

    @property
    def progress(self) -> CompileProgress:
        """Announces long compiles on the terminal (recorded only, on an xdist worker)."""
        if self._progress is None:
            self._progress = CompileProgress(
                None if self.worker else self._write_terminal_line, worker=self.worker
            )
        return self._progress

    def _write_terminal_line(self, line: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        guard = (
            capture.global_and_fixture_disabled()
            if capture is not None
            else contextlib.nullcontext()
        )
        with guard:
            write_own_line(reporter, line)

    def _program_ready(self, program: AotiProgram) -> None:
        self.config.hook.pytest_aoti_program_ready(config=self.config, program=program)

    # -- what fixtures and testers need ------------------------------------------------

    def defaults_for(
        self, item: pytest.Item, device: torch.device, export_mode: str = "default"
    ) -> CheckDefaults:
        """What a check of ``item`` on ``device`` starts from, lowest first: the options,
        the hooks, the ``--aoti-export`` variant, then the test's ``@pytest.mark.aoti(...)``
        (the closest marker wins; inductor configs are merged)."""
        __tracebackhide__ = True
        from pytest_aoti.options.resolve import layered_defaults

        hook = self.config.hook
        export_options = _merged(hook.pytest_aoti_export_options(item=item))
        if export_mode != "default":
            export_options["strict"] = export_mode == "strict"
        return layered_defaults(
            self.settings,
            reversed(list(item.iter_markers("aoti"))),
            inductor_configs=_merged(
                hook.pytest_aoti_inductor_configs(config=self.config, device=device, item=item)
            ),
            export_options=export_options,
            tolerance_hook=lambda path, dtype: hook.pytest_aoti_tolerance(
                item=item, path=path, dtype=dtype, device=device
            ),
        )

    def added_checks(self) -> tuple[Check, ...]:
        """The checks other plugins and conftests add (``pytest_aoti_checks``), asked once,
        at the first check: every conftest is loaded by then."""
        __tracebackhide__ = True
        if self._added_checks is None:
            from pytest_aoti.feature_hooks import other_results
            from pytest_aoti.run.added import added_checks

            # the features' own checks are built in (pytest_aoti.run.catalog)
            results = other_results(self.config, "pytest_aoti_checks", {"config": self.config})
            self._added_checks = added_checks(results)
        return self._added_checks

    def events_for(self, item: pytest.Item, device: torch.device) -> ItemEvents:
        """What the ``aoti`` fixture's tester reports to, for one test."""
        from pytest_aoti.reports.events import ItemEvents

        return ItemEvents(self, item, device)

    def bundle_dir(self, item: pytest.Item) -> Path | None:
        """Where the next repro bundle of ``item`` goes (``--aoti-keep-failed``), or None."""
        return self.artifacts.bundle_dir(item.nodeid)

    def profile_path(self, item: pytest.Item) -> Path | None:
        """Where this test's next Chrome trace goes (``--aoti-profile``), or None."""
        return self.artifacts.profile_path(item.nodeid)

    def observe_key(self, item: pytest.Item, check: int, program: AotiProgram) -> None:
        """Note a test whose program was compiled because only its weights changed since
        the last run (see :mod:`pytest_aoti.cache.history`)."""
        reseeded = self.collector.reseeded
        if self.stores.reseeded(item.nodeid, check, program) and item.nodeid not in reseeded:
            reseeded.append(item.nodeid)

    def record_inferred(self, item: pytest.Item, spec_text: str) -> None:
        """Keep a ``dynamic_shapes="auto"`` result where the user can copy it from: the
        terminal summary, the failure report and the JUnit properties."""
        item.user_properties.append(("aoti_inferred_dynamic_shapes", spec_text))
        item.add_report_section("call", "aoti inferred dynamic_shapes", spec_text)
        self.collector.inferred.append((item.nodeid, spec_text))

    # -- hooks ----------------------------------------------------------------------------

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Check the ini file's inductor configs once AOTI tests are collected (it needs
        torch's list of options)."""
        configs = self.settings.inductor_configs
        if configs and any(
            "aoti_device" in getattr(item, "fixturenames", ()) for item in session.items
        ):
            from pytest_aoti.compiling.pipeline import unknown_inductor_options

            problem = unknown_inductor_options(configs)
            if problem:
                raise pytest.UsageError(f"ini option aoti_inductor_configs: {problem}")

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        from pytest_aoti.reports.fleet import remote_header_line
        from pytest_aoti.reports.header import header_lines

        s = self.settings
        remote = remote_header_line(
            s.cache_url, s.cache_remote, s.cache_trusted_keys, s.cache_not_before
        )
        return header_lines(self.settings.devices, self.stores.cache_state()) + (
            [remote] if remote else []
        )

    def pytest_report_collectionfinish(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> list[str]:
        """The devices the run resolved to, once AOTI tests were collected (this imports
        torch, which a run without AOTI tests never does)."""
        if not any("aoti_device" in getattr(item, "fixturenames", ()) for item in items):
            return []
        from pytest_aoti.reports.header import describe_devices

        return [f"aoti: running on {describe_devices(self.devices)}"]

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        result = yield
        if "aoti" in getattr(item, "fixturenames", ()):
            self.stores.after_test()
            from pytest_aoti.reports.cost_hints import COMPILED_HERE, cost_hints

            compiled = item.stash.get(COMPILED_HERE, [])
            for line in cost_hints(item.nodeid, compiled):
                self.collector.note(line)
        return result

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.stores.start()

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        stores = self.stores
        if _is_xdist_worker(self.config):
            from pytest_aoti.reports.xdist import send_payload

            events = self._progress.events if self._progress is not None else []
            payload = self.collector.payload(stores.stats, events, stores.remote_stats)
            send_payload(self.config, payload)
            return
        if self.settings.report is not None:
            from pytest_aoti.reports.json_report import write_run_report

            write_run_report(
                self.settings.report,
                self.collector,
                stats=stores.stats,
                remote=stores.remote_stats,
                cache_url=self.settings.cache_url,
                devices=self.settings.devices,
                interrupted=exitstatus == pytest.ExitCode.INTERRUPTED,
            )
        workers = self.collector.worker_stats
        stores.evict(workers_used_programs=workers is not None and bool(workers.programs))

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        process = sys.modules.get("pytest_aoti.isolation.process")
        if process is not None:  # an engine ran in the child: end it
            process.shutdown()
        self.stores.close()

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from pytest_aoti.feature_hooks import results_in_feature_order
        from pytest_aoti.reports.fleet import remote_summary_lines
        from pytest_aoti.reports.terminal import write_summary

        settings = self.settings
        write_summary(
            terminalreporter,
            self.collector,
            self.collector.totals(self.stores.stats),
            durations=settings.durations,
            report=settings.report,
            remote=remote_summary_lines(
                settings.cache_url,
                self.collector.remote_figures(self.stores.remote_stats),
                mode=settings.cache_remote,
                ini_trusted=settings.cache_trusted_keys,
                not_before=settings.cache_not_before,
            ),
            sections=lambda: results_in_feature_order(
                self.config,
                "pytest_aoti_terminal_summary",
                {
                    "terminalreporter": terminalreporter,
                    "config": self.config,
                    "records": tuple(self.collector.records),
                },
            ),
        )


def session_of(config: pytest.Config) -> AotiSession:
    """The session's state, for a hook of the plugin's own features."""
    session = config.pluginmanager.get_plugin(SESSION_PLUGIN)
    assert isinstance(session, AotiSession)
    return session


def _merged(results: list[Mapping[str, Any] | None]) -> dict[str, Any]:
    """Results of a hook that every implementation answers, merged: pluggy lists the last
    registered plugin's first, and later plugins (closer conftests) win."""
    merged: dict[str, Any] = {}
    for result in reversed(results):
        merged.update(result or {})
    return merged


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")
