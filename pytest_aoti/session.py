"""Per-session state: settings, resolved devices, the program registry, the report collector.

Registered as the ``aoti-session`` plugin, so its hook methods run like any plugin's. Heavy
parts (torch, the registry, the store) are created on first use: a run without AOTI tests
never imports torch. It runs no checks and renders nothing itself: the records and every
view of them live in :mod:`pytest_aoti.reports`.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from pytest_aoti.errors import AotiUsageError
from pytest_aoti.reports.collector import ReportCollector
from pytest_aoti.reports.progress import CompileProgress, write_own_line
from pytest_aoti.settings import AotiSettings

if TYPE_CHECKING:
    import torch

    from pytest_aoti.compiling.history import KeyHistory
    from pytest_aoti.compiling.program import AotiProgram
    from pytest_aoti.compiling.registry import CompileStats, ProgramRegistry
    from pytest_aoti.compiling.remote import RemoteStore
    from pytest_aoti.compiling.store import ArtifactStore, CacheMode
    from pytest_aoti.reports.events import ItemEvents
    from pytest_aoti.tester import CheckDefaults


class AotiSession:
    """State shared by every AOTI test of one pytest process."""

    def __init__(self, config: pytest.Config, settings: AotiSettings) -> None:
        self.config = config
        self.settings = settings
        self._devices: tuple[str, ...] | None = None
        self._registry: ProgramRegistry | None = None
        self._store: ArtifactStore | None = None
        self._store_made = False
        self._remote: RemoteStore | None = None
        self._remote_made = False
        self._workdir: Path | None = None
        self._bundles: dict[str, int] = {}
        self._progress: CompileProgress | None = None
        self._profiles: dict[str, int] = {}
        self.collector = ReportCollector()
        """Records and figures of this process (and, on the xdist controller, the workers')."""
        self.warned_programs: set[str] = set()
        """Programs whose buffer mutation was warned about: once per session."""
        self._history: KeyHistory | None = None

    # -- lazily created parts ---------------------------------------------------------

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
    def store(self) -> ArtifactStore | None:
        """The on-disk artifact store, or None when the cache is off or unavailable."""
        if not self._store_made:
            self._store_made = True
            root = self.cache_root()
            if root is not None and self.settings.cache_mode != "off":
                from pytest_aoti.compiling.store import ArtifactStore

                self._store = ArtifactStore(
                    root,
                    mode=cast("CacheMode", self.settings.cache_mode),
                    max_bytes=self.settings.cache_max_size,
                    on_problem=self.collector.cache_problem,
                )
        return self._store

    @property
    def remote(self) -> RemoteStore | None:
        """The fleet's remote store (``--aoti-cache-url``), or None when there is none."""
        if not self._remote_made:
            self._remote_made = True
            settings = self.settings
            if settings.cache_url and settings.cache_remote != "off":
                from pytest_aoti.compiling.remote_open import open_remote

                self._remote = open_remote(
                    settings.cache_url,
                    mode=settings.cache_remote,
                    ini_options=settings.cache_storage_options,
                    ini_trusted=[
                        str(self.config.rootpath / p) for p in settings.cache_trusted_keys
                    ],
                    on_problem=self.collector.cache_problem,
                    not_before=settings.cache_not_before,
                )
        return self._remote

    @property
    def registry(self) -> ProgramRegistry:
        if self._registry is None:
            from pytest_aoti.compiling.registry import ProgramRegistry

            self._workdir = Path(tempfile.mkdtemp(prefix="pytest-aoti-"))
            self._registry = ProgramRegistry(
                self._workdir, self.store, self._program_ready, self.progress, remote=self.remote
            )
        return self._registry

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

    @property
    def cache_problems(self) -> list[str]:
        """Cache problems the store repaired or worked around: listed in the terminal
        summary, never a warning (under ``filterwarnings = error`` it would fail a test
        that then passes on the next run)."""
        return self.collector.cache_problems

    @property
    def inferred(self) -> list[tuple[str, str]]:
        return self.collector.inferred

    def cache_root(self) -> Path | None:
        if self.settings.cache_dir is not None:
            return self.settings.cache_dir
        cache = getattr(self.config, "cache", None)
        if cache is None:  # -p no:cacheprovider
            return None
        try:
            root = Path(cache.mkdir("aoti"))
        except OSError as error:
            self.collector.cache_problem(f"pytest-aoti cache off for this run: {error}")
            return None
        # pytest creates it under the umask (0o775 under umask 002); it is ours, and the
        # store refuses a directory others can write to: make it private
        root.chmod(0o700)
        return root

    def check_cache_dir(self) -> None:
        """Open the store of ``--aoti-cache-dir`` now: a directory it cannot use at all is a
        usage error at startup, not a cache that quietly turns itself off."""
        where = self.settings.cache_dir
        if where is None or self.settings.cache_mode == "off" or _is_xdist_worker(self.config):
            return
        store = self.store
        if store is None or store.readable:
            return
        problems = self.cache_problems
        reason = problems[-1] if problems else f"{where} cannot be used"
        raise pytest.UsageError(
            f"--aoti-cache-dir={where}: {reason}; pass a directory you can write to "
            "(or --aoti-cache=off)"
        )

    def cache_state(self) -> str:
        """The cache as the run will use it, for the header: ``readwrite at DIR``,
        ``read at DIR (why)`` or ``off (why)``.

        pytest's own cache folder is not created for the header: a run without AOTI tests
        leaves no ``.pytest_cache/d/aoti`` behind."""
        mode = self.settings.cache_mode
        if mode == "off":
            return "off"
        if self.settings.cache_dir is None:
            if getattr(self.config, "cache", None) is None:
                return "off (pytest's cache provider is disabled; --aoti-cache-dir sets one)"
            if not self._store_made:
                return f"{mode} at .pytest_cache/d/aoti"
        store = self.store
        problems = self.cache_problems
        why = problems[-1] if problems else "unusable"
        if store is None or not store.readable:
            return f"off ({why})"
        if mode == "readwrite" and not store.writable:
            return f"read at {store.root} ({why})"
        return f"{mode} at {store.root}"

    def observe_key(self, item: pytest.Item, check: int, program: AotiProgram) -> None:
        """Note a test whose program was compiled because only its weights changed since
        the last run (see :mod:`pytest_aoti.compiling.history`)."""
        cache = getattr(self.config, "cache", None)
        if cache is None:
            return
        if self._history is None:
            from pytest_aoti.compiling.history import KeyHistory

            self._history = KeyHistory(Path(cache.mkdir("aoti-keys")))
        compiled = program.first_use and not program.cache_hit
        if self._history.observe(item.nodeid, check, program.key_parts, compiled):
            reseeded = self.collector.reseeded
            if item.nodeid not in reseeded:
                reseeded.append(item.nodeid)

    def hypothesis_database(self) -> Path | None:
        """Where Hypothesis keeps failing generated shapes: pytest's cache dir."""
        cache = getattr(self.config, "cache", None)
        return None if cache is None else Path(cache.mkdir("aoti-hypothesis"))

    # -- what fixtures need -------------------------------------------------------------

    def defaults_for(
        self, item: pytest.Item, device: torch.device, export_mode: str = "default"
    ) -> CheckDefaults:
        """What a check of ``item`` on ``device`` starts from, lowest first: the options,
        the hooks, the ``--aoti-export`` variant, then the test's ``@pytest.mark.aoti(...)``
        (the closest marker wins; inductor configs are merged)."""
        __tracebackhide__ = True
        from pytest_aoti.settings import marker_options, option_problem
        from pytest_aoti.tester import CheckDefaults

        hook = self.config.hook
        export_options = _merged(hook.pytest_aoti_export_options(item=item))
        if export_mode != "default":
            export_options["strict"] = export_mode == "strict"
        defaults = CheckDefaults(
            inductor_configs={
                **(self.settings.inductor_configs or {}),
                **_merged(
                    hook.pytest_aoti_inductor_configs(config=self.config, device=device, item=item)
                ),
            },
            export_options=export_options,
            tolerance_hook=lambda path, dtype: hook.pytest_aoti_tolerance(
                item=item, path=path, dtype=dtype, device=device
            ),
        ).overridden(**self.settings.check_defaults())
        allowed = marker_options()
        for marker in reversed(list(item.iter_markers("aoti"))):
            if marker.args:
                raise AotiUsageError(
                    f"@pytest.mark.aoti takes keyword options only ({', '.join(allowed)}), "
                    f"got positional {marker.args!r}"
                )
            unknown = sorted(set(marker.kwargs) - set(allowed))
            if unknown:
                raise AotiUsageError(
                    f"@pytest.mark.aoti got unknown option(s) {', '.join(unknown)}; "
                    f"allowed: {', '.join(allowed)}"
                )
            for name, value in marker.kwargs.items():
                problem = option_problem(name, value)
                if problem:
                    raise AotiUsageError(f"@pytest.mark.aoti: {problem}")
            defaults = defaults.overridden(**marker.kwargs)
        return defaults

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

    def events_for(self, item: pytest.Item, device: torch.device) -> ItemEvents:
        """What the ``aoti`` fixture's tester reports to, for one test."""
        from pytest_aoti.reports.events import ItemEvents

        return ItemEvents(self, item, device)

    def bundle_dir(self, item: pytest.Item) -> Path | None:
        """Where the next repro bundle of ``item`` goes (``--aoti-keep-failed``), or None."""
        root = self.settings.keep_failed
        if root is None:
            return None
        from pytest_aoti.triage.repro import bundle_dir_name

        name = bundle_dir_name(item.nodeid)
        self._bundles[name] = self._bundles.get(name, 0) + 1
        if self._bundles[name] > 1:  # a test that goes on after a failed check
            name = f"{name}-{self._bundles[name]}"
        return root / name

    def profile_path(self, item: pytest.Item) -> Path | None:
        """Where this test's next Chrome trace goes (``--aoti-profile``)."""
        root = self.settings.profile
        if root is None:
            return None
        from pytest_aoti.triage.repro import bundle_dir_name

        name = bundle_dir_name(item.nodeid)
        self._profiles[name] = self._profiles.get(name, 0) + 1
        count = self._profiles[name]
        return root / (f"{name}.json" if count == 1 else f"{name}-{count}.json")

    def record_inferred(self, item: pytest.Item, spec_text: str) -> None:
        """Keep a ``dynamic_shapes="auto"`` result where the user can copy it from: the
        terminal summary, the failure report and the JUnit properties."""
        item.user_properties.append(("aoti_inferred_dynamic_shapes", spec_text))
        item.add_report_section("call", "aoti inferred dynamic_shapes", spec_text)
        self.collector.inferred.append((item.nodeid, spec_text))

    def _program_ready(self, program: AotiProgram) -> None:
        self.config.hook.pytest_aoti_program_ready(config=self.config, program=program)

    # -- hooks ----------------------------------------------------------------------------

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        from pytest_aoti.reports.header import header_lines
        from pytest_aoti.reports.remote import remote_header_line

        s = self.settings
        remote = remote_header_line(s.cache_url, s.cache_remote, s.cache_trusted_keys)
        return header_lines(self.settings.devices, self.cache_state()) + (
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
        if self._registry is not None and "aoti" in getattr(item, "fixturenames", ()):
            _return_freed_heap()
        return result

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.remote  # noqa: B018 - opening it now makes a missing package or bad key a usage error
        if self.settings.cache_clear and not _is_xdist_worker(self.config):
            store = self.store
            if store is not None:
                store.clear()

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if _is_xdist_worker(self.config):
            from pytest_aoti.reports.xdist import send_payload

            events = self._progress.events if self._progress is not None else []
            remote = None if self._remote is None else self._remote.stats.to_json()
            send_payload(self.config, self.collector.payload(self.own_stats, events, remote))
            return
        if self.settings.report is not None:
            self._write_report(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
        # evict once, here: on the xdist controller, which compiles nothing itself and so
        # has no store yet, as soon as a worker used a program
        workers = self.collector.worker_stats
        used = self._store is not None or (workers is not None and bool(workers.programs))
        store = self.store if used else None
        if store is not None and store.writable:
            store.evict()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        runner = sys.modules.get("pytest_aoti.checks.probe_runner")
        if runner is not None:  # the probes ran: end their child process
            runner.shutdown()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from pytest_aoti.reports.remote import remote_summary_lines
        from pytest_aoti.reports.terminal import write_summary

        settings = self.settings
        # what the hazards were is kept only where the run may write its cache
        probed = (
            settings.cache_mode == "readwrite"
            and not _is_xdist_worker(self.config)
            and any(record.probes for record in self.collector.records)
        )
        write_summary(
            terminalreporter,
            self.collector,
            self.totals(),
            durations=settings.durations,
            report=settings.report,
            remote=remote_summary_lines(
                settings.cache_url,
                self.remote_figures(),
                mode=settings.cache_remote,
                ini_trusted=settings.cache_trusted_keys,
            ),
            hazards="all" if self.config.get_verbosity() > 0 else settings.hazards,
            serving_checks=bool(settings.serving_checks),
            # kept where the plugin keeps its packages
            memory=self.cache_root() if probed else None,
        )

    # -- figures ----------------------------------------------------------------------------

    @property
    def own_stats(self) -> CompileStats | None:
        """What this process spent on programs; None before it compiled anything."""
        return None if self._registry is None else self._registry.stats

    def totals(self) -> CompileStats:
        """This process's and the workers' compile figures."""
        return self.collector.totals(self.own_stats)

    def remote_figures(self) -> list[dict[str, Any]]:
        """``{"remote": ...}`` of this process and of each xdist worker with a remote store."""
        own = [] if self._remote is None else [self._remote.stats.to_json()]
        return [{"remote": figures} for figures in [*own, *self.collector.worker_remote]]

    def summary_line(self) -> str:
        """``aoti: 3 programs; 2 compiled in 14.1 s; 1 loaded from cache in 0.02 s``."""
        from pytest_aoti.reports.terminal import summary_line

        return summary_line(self.totals())

    def _write_report(self, interrupted: bool) -> None:
        from pytest_aoti.reports.json_report import write_json_report
        from pytest_aoti.reports.remote import remote_totals

        assert self.settings.report is not None
        total = self.totals()
        collector = self.collector
        devices = sorted(
            {record.device for record in collector.records}
            | {record.device for record in collector.compiles}
        )
        write_json_report(
            self.settings.report,
            collector.records,
            devices=devices or list(self.settings.devices),
            totals={
                **total.to_json(),
                **remote_totals(self.settings.cache_url, self.remote_figures()),
            },
            interrupted=interrupted,
            compiles=collector.compiles,
        )


def _return_freed_heap() -> None:
    """Hand the heap pages a test's eager runs and copies freed back to the system: glibc
    keeps them otherwise, about a quarter of a large model's size per program (measured
    with ``benchmarks/bench_memory.py``). A no-op where the C library has no
    ``malloc_trim``."""
    import ctypes

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


def _merged(results: list[Mapping[str, Any] | None]) -> dict[str, Any]:
    """Results of a hook that every implementation answers, merged: pluggy lists the last
    registered plugin's first, and later plugins (closer conftests) win."""
    merged: dict[str, Any] = {}
    for result in reversed(results):
        merged.update(result or {})
    return merged


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")
