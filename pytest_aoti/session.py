"""Per-session state, registered as the ``aoti-session`` plugin: glue that hands each hook's
work to its owner (:class:`~pytest_aoti.cache.run_stores.RunStores`, :mod:`pytest_aoti.reports`).
Heavy parts are created on first use: a run without AOTI tests never imports torch."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_aoti.cache.run_stores import RunStores
from pytest_aoti.compiling.pipeline import unknown_inductor_options
from pytest_aoti.devices import devices_from_ini, resolve_devices, resolve_ini_devices
from pytest_aoti.hook_order import answers_in_order
from pytest_aoti.isolation.process import prestart_engine_child
from pytest_aoti.options.resolve import layered_defaults
from pytest_aoti.options.settings import AotiSettings
from pytest_aoti.plugins import DEFAULT_PLUGINS
from pytest_aoti.reports.artifacts import ArtifactPaths
from pytest_aoti.reports.collector import ReportCollector
from pytest_aoti.reports.cost_hints import COMPILED_HERE, cost_hints
from pytest_aoti.reports.header import describe_devices, header_lines
from pytest_aoti.reports.progress import CompileProgress, write_own_line
from pytest_aoti.reports.terminal import write_summary
from pytest_aoti.reports.xdist import send_payload
from pytest_aoti.run.added import PluginChecks, plugin_checks
from pytest_aoti.session_garbage import collect_and_freeze

if TYPE_CHECKING:
    import torch

    from pytest_aoti.compiling.program import AotiProgram
    from pytest_aoti.options.catalog import Catalog
    from pytest_aoti.options.defaults import CheckDefaults


SESSION_PLUGIN = "aoti-session"

SESSION_KEY = pytest.StashKey["AotiSession"]()
"""The run's :class:`AotiSession` on ``config.stash`` (it is also registered as a plugin,
for its hooks)."""


class AotiSession:
    """State shared by every AOTI test of one pytest process."""

    def __init__(self, config: pytest.Config, settings: AotiSettings, catalog: Catalog) -> None:
        self.config = config
        self.settings = settings
        self.catalog = catalog
        self._devices: tuple[str, ...] | None = None
        self._progress: CompileProgress | None = None
        self.collector = ReportCollector()  # on the xdist controller, the workers' too
        self.stores = RunStores(
            config,
            settings,
            on_problem=self.collector.cache_problem,
            problems=self.collector.cache_problems,
            watcher=lambda: self.progress,
            on_ready=self._program_ready,
        )
        # the triage plugin's --aoti-keep-failed, where the run has it
        keep_failed = next(
            (s.keep_failed for s in settings.features.values() if hasattr(s, "keep_failed")),
            None,
        )
        self.artifacts = ArtifactPaths(keep_failed, settings.profile)
        self.warned_programs: set[str] = set()  # buffer mutation noted: once per session
        self._plugin_checks: PluginChecks | None = None

    @property
    def worker(self) -> str:
        """This process's xdist worker id (``gw0``); empty without xdist or on the controller."""
        return str(getattr(self.config, "workerinput", {}).get("workerid", ""))

    @property
    def devices(self) -> tuple[str, ...]:
        """``--aoti-device`` resolved (imports torch), less :attr:`skipped_devices`."""
        if self._devices is None:
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
        """Devices of the ini's list this machine lacks, with why (their tests are skipped)."""
        return self.collector.skipped_devices

    def torch_device(self, name: str) -> torch.device:
        """A bare ``cuda`` on xdist worker ``gwI`` is ``cuda:(I mod GPUs)``; ids stay ``[cuda]``."""
        import torch  # torch loads on first use: a run without AOTI tests never imports it

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
        cap = self.config.pluginmanager.get_plugin("capturemanager")
        with contextlib.nullcontext() if cap is None else cap.global_and_fixture_disabled():
            write_own_line(reporter, line)

    def _program_ready(self, program: AotiProgram) -> None:
        self.config.hook.pytest_aoti_program_ready(config=self.config, program=program)

    def defaults_for(
        self, item: pytest.Item, device: torch.device, export_mode: str = "default"
    ) -> CheckDefaults:
        """What a check starts from, lowest first: options, hooks, ``--aoti-export``, markers."""
        __tracebackhide__ = True
        hook = self.config.hook
        export_options = _merged(hook.pytest_aoti_export_options(item=item))
        if export_mode != "default":
            export_options["strict"] = export_mode == "strict"
        return layered_defaults(
            self.settings,
            reversed(list(item.iter_markers("aoti"))),
            catalog=self.catalog,
            inductor_configs=_merged(
                hook.pytest_aoti_inductor_configs(config=self.config, device=device, item=item)
            ),
            export_options=export_options,
            tolerance_hook=lambda path, dtype: hook.pytest_aoti_tolerance(
                item=item, path=path, dtype=dtype, device=device
            ),
        )

    def plugin_checks(self) -> PluginChecks:
        """The checks of ``pytest_aoti_checks``, asked at the first check (all conftests loaded)."""
        __tracebackhide__ = True
        if self._plugin_checks is None:
            from pytest_aoti.run import catalog  # imports torch

            answers = answers_in_order(
                self.config.pluginmanager, "pytest_aoti_checks", DEFAULT_PLUGINS, config=self.config
            )
            self._plugin_checks = plugin_checks(answers, catalog.CHECKS)
        return self._plugin_checks

    def bundle_dir(self, item: pytest.Item) -> Path | None:
        return self.artifacts.bundle_dir(item.nodeid)

    def profile_path(self, item: pytest.Item) -> Path | None:
        return self.artifacts.profile_path(item.nodeid)

    def observe_key(self, item: pytest.Item, check: int, program: AotiProgram) -> None:
        """Note a test recompiled because only its weights changed since the last run."""
        reseeded = self.collector.reseeded
        if self.stores.reseeded(item.nodeid, check, program) and item.nodeid not in reseeded:
            reseeded.append(item.nodeid)

    def note_served(self, item: pytest.Item, key: str | None) -> None:
        """Note the program the engine child served the test (None: none); the test's next
        run starts the child at its setup, loading that program's package."""
        self.stores.note_served(item.nodeid, key)

    def record_inferred(self, item: pytest.Item, spec_text: str) -> None:
        """Keep a ``dynamic_shapes="auto"`` result where the user can copy it from."""
        item.user_properties.append(("aoti_inferred_dynamic_shapes", spec_text))
        item.add_report_section("call", "aoti inferred dynamic_shapes", spec_text)
        self.collector.inferred.append((item.nodeid, spec_text))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Check the ini's inductor configs once AOTI tests are collected (needs torch)."""
        configs = self.settings.inductor_configs
        if configs and any(
            "aoti_device" in getattr(item, "fixturenames", ()) for item in session.items
        ):
            problem = unknown_inductor_options(configs)
            if problem:
                raise pytest.UsageError(f"ini option aoti_inductor_configs: {problem}")

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        plugins = config.hook.pytest_aoti_header_lines(config=config)
        lines = [line for found in reversed(plugins) for line in found or ()]
        return header_lines(self.settings.devices, self.stores.cache_state()) + lines

    def pytest_report_collectionfinish(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> list[str]:
        """The devices the run resolved to, once AOTI tests were collected (imports torch)."""
        if not any("aoti_device" in getattr(item, "fixturenames", ()) for item in items):
            return []
        return [f"aoti: running on {describe_devices(self.devices)}"]

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        result = yield
        if "aoti" in getattr(item, "fixturenames", ()):
            self.stores.after_test()
            compiled = item.stash.get(COMPILED_HERE, [])
            for line in cost_hints(item.nodeid, compiled):
                self.collector.note(line)
        return result

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.stores.start()
        if self._runs_tests() and self.stores.served_any():
            # the child served tests on the last run: it imports torch while the test
            # modules do, and a served test's setup finds it ready to load its package
            prestart_engine_child()

    def _runs_tests(self) -> bool:
        """This process runs tests (not an xdist controller) on a device the child serves."""
        controller = getattr(self.config.option, "dist", "no") != "no" and not hasattr(
            self.config, "workerinput"
        )
        # the devices as given: resolving "auto" would import torch before the child
        served = any(
            name.split(":")[0] in ("auto", "cpu", "cuda") for name in self.settings.devices
        )
        return served and not controller

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        stores = self.stores
        if hasattr(self.config, "workerinput"):  # an xdist worker
            events = self._progress.events if self._progress is not None else []
            payload = self.collector.payload(stores.stats, events, self._own_figures())
            send_payload(self.config, payload)
            return
        figures = self.collector.figures(self._own_figures())
        if self.settings.report is not None:
            self.collector.write_run_report(
                self.settings.report,
                stats=stores.stats,
                totals=_merged(
                    self.config.hook.pytest_aoti_totals(config=self.config, figures=figures)
                ),
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
        collect_and_freeze(config)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        write_summary(
            terminalreporter,
            self.collector,
            self.collector.totals(self.stores.stats),
            durations=self.settings.durations,
            report=self.settings.report,
            closing=[
                line
                for lines in self.config.hook.pytest_aoti_summary_lines(
                    config=self.config, figures=self.collector.figures(self._own_figures())
                )
                for line in lines or ()
            ],
            # each plugin's section in turn, in the default plugins' order
            sections=lambda: answers_in_order(
                self.config.pluginmanager,
                "pytest_aoti_terminal_summary",
                DEFAULT_PLUGINS,
                terminalreporter=terminalreporter,
                config=self.config,
                records=tuple(self.collector.records),
            ),
        )

    def _own_figures(self) -> dict[str, Any]:
        return _merged(self.config.hook.pytest_aoti_figures(config=self.config))


def session_of(config: pytest.Config) -> AotiSession:
    """The session's state, for a hook of the plugin's own features."""
    return config.stash[SESSION_KEY]


def _merged(results: list[Mapping[str, Any] | None]) -> dict[str, Any]:
    """A hook's results merged: pluggy lists the last registered first; closer conftests win."""
    merged: dict[str, Any] = {}
    for result in reversed(results):
        merged.update(result or {})
    return merged
