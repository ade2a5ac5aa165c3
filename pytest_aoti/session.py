"""Per-session state: settings, resolved devices, the program registry, figures to report.

Registered as the ``aoti-session`` plugin, so its hook methods run like any plugin's. Heavy
parts (torch, the registry, the store) are created on first use: a run without AOTI tests
never imports torch.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from pytest_aoti.errors import AotiCheckError, AotiUsageError
from pytest_aoti.reports.records import CheckRecord, ReportCollector
from pytest_aoti.settings import AotiSettings

if TYPE_CHECKING:
    import torch

    from pytest_aoti.compiling.program import AotiProgram
    from pytest_aoti.compiling.registry import ProgramRegistry
    from pytest_aoti.compiling.store import ArtifactStore, CacheMode
    from pytest_aoti.reports.records import CompileProgress
    from pytest_aoti.tester import CheckDefaults, CheckResult, _CheckPlan


class AotiSession:
    """State shared by every AOTI test of one pytest process."""

    def __init__(self, config: pytest.Config, settings: AotiSettings) -> None:
        self.config = config
        self.settings = settings
        self._devices: tuple[str, ...] | None = None
        self._registry: ProgramRegistry | None = None
        self._store: ArtifactStore | None = None
        self._store_made = False
        self._workdir: Path | None = None
        self.worker_stats: list[Mapping[str, Any]] = []
        self.inferred: list[tuple[str, str]] = []
        self._bundles: dict[str, int] = {}
        self._progress: CompileProgress | None = None
        self._profiles: dict[str, int] = {}
        self.collector = ReportCollector()
        self.cache_problems: list[str] = []
        self.warned_programs: set[str] = set()
        """Programs whose buffer mutation was warned about: once per session."""

    # -- lazily created parts ---------------------------------------------------------

    @property
    def devices(self) -> tuple[str, ...]:
        """``--aoti-device`` with ``auto`` resolved; imports torch on first use."""
        if self._devices is None:
            from pytest_aoti.devices import resolve_devices

            self._devices = resolve_devices(self.settings.devices)
        return self._devices

    def torch_device(self, name: str) -> torch.device:
        """The ``torch.device`` of a device name of the run. A bare ``cuda`` on xdist worker
        ``gwI`` is ``cuda:(I mod GPUs)``: one GPU per worker, while test ids stay ``[cuda]``
        on every worker (xdist needs identical collections)."""
        import torch

        worker = getattr(self.config, "workerinput", {}).get("workerid", "")
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
                    on_problem=self._cache_problem,
                )
        return self._store

    @property
    def registry(self) -> ProgramRegistry:
        if self._registry is None:
            from pytest_aoti.compiling.registry import ProgramRegistry

            self._workdir = Path(tempfile.mkdtemp(prefix="pytest-aoti-"))
            self._registry = ProgramRegistry(
                self._workdir, self.store, self._program_ready, self.progress
            )
        return self._registry

    @property
    def progress(self) -> CompileProgress:
        """Announces long compiles on the terminal (recorded only, on an xdist worker)."""
        if self._progress is None:
            from pytest_aoti.reports.records import CompileProgress

            worker = getattr(self.config, "workerinput", {}).get("workerid", "")
            self._progress = CompileProgress(
                None if worker else self._write_terminal_line, worker=worker
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
            reporter.ensure_newline()
            reporter.write_line(line)

    def _cache_problem(self, message: str) -> None:
        """A cache problem the store repaired or worked around: listed in the terminal
        summary, never a warning (under ``filterwarnings = error`` it would fail a test
        that then passes on the next run)."""
        if message not in self.cache_problems:
            self.cache_problems.append(message)

    def cache_root(self) -> Path | None:
        if self.settings.cache_dir is not None:
            return self.settings.cache_dir
        cache = getattr(self.config, "cache", None)
        if cache is None:  # -p no:cacheprovider
            return None
        root = Path(cache.mkdir("aoti"))
        # pytest creates it under the umask (0o775 under umask 002); it is ours, and the
        # store refuses a directory others can write to: make it private
        root.chmod(0o700)
        return root

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
        from pytest_aoti.tester import MARKER_OPTIONS, CheckDefaults

        hook = self.config.hook
        export_options = _merged(hook.pytest_aoti_export_options(item=item))
        if export_mode != "default":
            export_options["strict"] = export_mode == "strict"
        defaults = CheckDefaults(
            **self.settings.check_defaults(),
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
        )
        for marker in reversed(list(item.iter_markers("aoti"))):
            if marker.args:
                raise AotiUsageError(
                    f"@pytest.mark.aoti takes keyword options only ({', '.join(MARKER_OPTIONS)}), "
                    f"got positional {marker.args!r}"
                )
            unknown = sorted(set(marker.kwargs) - set(MARKER_OPTIONS))
            if unknown:
                raise AotiUsageError(
                    f"@pytest.mark.aoti got unknown option(s) {', '.join(unknown)}; "
                    f"allowed: {', '.join(MARKER_OPTIONS)}"
                )
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
        return ItemEvents(self, item, device)

    def write_bundle(
        self, item: pytest.Item, program: AotiProgram, error: AotiCheckError
    ) -> str | None:
        """Keep a repro bundle of a failed check under ``--aoti-keep-failed``; return the
        line the failure report shows about it."""
        root = self.settings.keep_failed
        if root is None or error.replay is None:
            return None
        from pytest_aoti.triage.repro import bundle_dir_name, write_bundle

        name = bundle_dir_name(item.nodeid)
        self._bundles[name] = self._bundles.get(name, 0) + 1
        if self._bundles[name] > 1:  # a test that goes on after a failed check
            name = f"{name}-{self._bundles[name]}"
        replay = error.replay
        tolerance = error.finding.tolerance or {}
        explicit = tolerance.get("source") == "set by the test"
        try:
            script = write_bundle(
                root / name,
                exported=program.exported,
                package_path=program.package_path,
                args=replay.args,
                kwargs=replay.kwargs,
                calls=replay.calls,
                eager_results=replay.eager_results(program),
                rtol=tolerance.get("rtol") if explicit else None,
                atol=tolerance.get("atol") if explicit else None,
                finding_text=error.finding.render(),
                finding_json=error.finding.to_json(),
                device=program.device,
            )
        except Exception as problem:  # the bundle is a bonus: never mask the failure
            return f"repro bundle not written: {type(problem).__name__}: {problem}".splitlines()[0]
        return f"repro bundle: {script.parent} (python {script} exits 1 while it reproduces)"

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
        self.inferred.append((item.nodeid, spec_text))

    def _program_ready(self, program: AotiProgram) -> None:
        self.config.hook.pytest_aoti_program_ready(config=self.config, program=program)

    # -- hooks ----------------------------------------------------------------------------

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        from pytest_aoti.reports.records import compiler_version, torch_build, torch_version

        mode = self.settings.cache_mode
        where = self.settings.cache_dir or ".pytest_cache/d/aoti"
        if mode == "off":
            cache = "off"
        elif self.settings.cache_dir is None and getattr(config, "cache", None) is None:
            cache = "off (pytest's cache provider is disabled; --aoti-cache-dir sets one)"
        else:
            cache = f"{mode} at {where}"
        lines = [
            f"aoti: device={','.join(self.settings.devices)}, cache={cache}",
            f"aoti: torch {torch_version()} ({torch_build()} build)",
        ]
        if any(name in ("cpu", "auto") for name in self.settings.devices):
            lines[-1] += f", C++ compiler: {compiler_version()}"
        return lines

    def pytest_report_collectionfinish(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> list[str]:
        """The devices the run resolved to, once AOTI tests were collected (this imports
        torch, which a run without AOTI tests never does)."""
        if not any("aoti_device" in getattr(item, "fixturenames", ()) for item in items):
            return []
        from pytest_aoti.reports.records import describe_devices

        return [f"aoti: running on {describe_devices(self.devices)}"]

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        result = yield
        if self._registry is not None and "aoti" in getattr(item, "fixturenames", ()):
            _return_freed_heap()
        return result

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if self.settings.cache_clear and not _is_xdist_worker(self.config):
            store = self.store
            if store is not None:
                store.clear()

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if _is_xdist_worker(self.config):
            output = self.config.workeroutput  # type: ignore[attr-defined]
            output["aoti_stats"] = self.stats_json()
            events = self._progress.events if self._progress is not None else []
            output["aoti_report"] = self.collector.worker_output(events)
            return
        if self.settings.report is not None:
            self._write_report(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
        # evict once, here: on the xdist controller, which compiles nothing itself and so
        # has no store yet, as soon as a worker used a program
        used = self._store is not None or any(figures["programs"] for figures in self.worker_stats)
        store = self.store if used else None
        if store is not None and store.writable:
            store.evict()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        inferred = self.inferred + [
            (nodeid, text)
            for figures in self.worker_stats
            for nodeid, text in figures.get("inferred", [])
        ]
        if inferred:
            terminalreporter.write_sep("-", "aoti: inferred dynamic_shapes")
            for nodeid, text in sorted(inferred):
                terminalreporter.write_line(f"{nodeid}:")
                for line in text.splitlines():
                    terminalreporter.write_line(f"    {line}")
        from pytest_aoti.reports.records import durations_table, worker_lines

        records = self.collector.records
        if records and self.settings.durations >= 0:
            limit = self.settings.durations
            title = "all AOTI checks" if limit == 0 else f"slowest {limit} AOTI checks"
            terminalreporter.write_sep("-", f"aoti: {title}")
            for row in durations_table(records, limit):
                terminalreporter.write_line(row)
        worker_events = self.collector.events
        if worker_events:
            terminalreporter.write_sep("-", "aoti: compiles on xdist workers")
            for row in worker_lines(worker_events):
                terminalreporter.write_line(row)
        unmeasured = [record for record in records if record.extra_bytes_unmeasured]
        if unmeasured:
            devices = ", ".join(sorted({record.device for record in unmeasured}))
            terminalreporter.write_line(
                f"aoti: max_extra_bytes was not measured in {len(unmeasured)} check(s) on "
                f"{devices}: device memory is measured on CUDA only"
            )
        from pytest_aoti.reports.hazards import write_hazards

        write_hazards(terminalreporter, records)
        problems = list(self.cache_problems)
        for figures in self.worker_stats:
            problems += [p for p in figures.get("cache_problems", []) if p not in problems]
        if problems:
            terminalreporter.write_sep("-", "aoti: cache problems (repaired; no test failed)")
            for problem in problems:
                terminalreporter.write_line(problem)
        line = self.summary_line()
        if line:
            terminalreporter.write_line(line)
        if self.settings.report is not None and records:
            terminalreporter.write_line(f"aoti: report written to {self.settings.report}")

    # -- figures ----------------------------------------------------------------------------

    def stats_json(self) -> dict[str, Any]:
        if self._registry is None:
            return {
                "programs": [],
                "compiled": 0,
                "compile_seconds": 0.0,
                "loaded": 0,
                "load_seconds": 0.0,
                "inferred": self.inferred,
                "cache_problems": self.cache_problems,
            }
        stats = self._registry.stats
        return {
            **stats.to_json(),
            "programs": sorted(stats.programs),
            "inferred": self.inferred,
            "cache_problems": self.cache_problems,
        }

    def _write_report(self, interrupted: bool) -> None:
        from pytest_aoti.compiling.registry import CompileStats
        from pytest_aoti.reports.records import write_json_report

        assert self.settings.report is not None
        total = CompileStats()
        for figures in [self.stats_json(), *self.worker_stats]:
            total.programs.update(figures["programs"])
            total.merge(figures)
        devices = sorted({record.device for record in self.collector.records})
        write_json_report(
            self.settings.report,
            self.collector.records,
            devices=devices or list(self.settings.devices),
            totals={**total.to_json(), "programs": len(total.programs)},
            interrupted=interrupted,
        )

    def summary_line(self) -> str:
        """``aoti: 3 programs; 2 compiled in 14.1 s; 1 loaded from cache in 0.02 s``."""
        from pytest_aoti.compiling.registry import CompileStats

        total = CompileStats()
        for figures in [self.stats_json(), *self.worker_stats]:
            total.programs.update(figures["programs"])
            total.merge(figures)
        if not total.programs:
            return ""
        return (
            f"aoti: {len(total.programs)} program{'s' if len(total.programs) != 1 else ''}; "
            f"{total.compiled} compiled in {total.compile_seconds:.1f} s; "
            f"{total.loaded} loaded from cache in {total.load_seconds:.2f} s"
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


class XdistControllerHooks:
    """Collects workers' figures on the xdist controller; registered only with xdist."""

    def __init__(self, session: AotiSession) -> None:
        self._session = session

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", {})
        figures = output.get("aoti_stats")
        if figures:
            self._session.worker_stats.append(figures)
        report = output.get("aoti_report")
        if report:
            self._session.collector.add_worker_output(report)


class ItemEvents:
    """The session's side of one test's tester: records, properties, bundles, hooks."""

    def __init__(self, session: AotiSession, item: pytest.Item, device: torch.device) -> None:
        self._session = session
        self._item = item
        self._device = device

    def compiled(self, program: AotiProgram) -> None:
        for name, value in (
            ("aoti_device", str(self._device)),
            ("aoti_program", program.key),
            ("aoti_cache_hit", program.cache_hit),
            ("aoti_compile_seconds", round(program.seconds_compiled_here, 3)),
        ):
            self._item.user_properties.append((name, value))

    def not_compiled(self, error: Exception, seconds: float) -> None:
        stage = "export" if "export" in type(error).__name__.lower() else "compile"
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        self._add(
            CheckRecord(
                test=self._item.nodeid,
                device=str(self._device),
                program="",
                cache_hit=False,
                compile_seconds=0.0,
                original_compile_seconds=0.0,
                outcome="failed",
                finding={"kind": stage, "message": first, "stage": stage},
                check_seconds=seconds,
            )
        )

    def checked(
        self,
        program: AotiProgram,
        result: CheckResult | None,
        error: AotiCheckError | None,
        plan: _CheckPlan,
        seconds: float,
    ) -> None:
        record = CheckRecord(
            test=self._item.nodeid,
            device=str(self._device),
            program=program.key,
            cache_hit=program.cache_hit,
            compile_seconds=program.seconds_compiled_here,
            original_compile_seconds=program.compile_seconds,
            outcome="passed" if error is None else "failed",
            calls=plan.calls,
            check_seconds=seconds,
        )
        if plan.probes is not None:
            record.probes = plan.probes.to_json()
            if plan.probes.error:
                self._item.user_properties.append(("aoti_probes_error", plan.probes.error))
        if result is not None:
            record.max_abs = result.max_abs
            record.max_rel = result.max_rel
            record.tolerance_used = max(
                (leaf.tolerance_used for _, leaf in result.stats), default=0.0
            )
            record.shapes_tried = result.input_sets
            record.extra_bytes = result.extra_bytes
            record.extra_bytes_unmeasured = (
                plan.max_extra_bytes is not None and result.extra_bytes is None
            )
            try:
                self._measure(record, program, plan)
            except Exception as problem:  # a measurement must never fail a passed check
                self._item.user_properties.append(
                    ("aoti_measure_error", f"{type(problem).__name__}: {problem}")
                )
        if error is not None:
            record.finding = error.finding.to_json()
            figures = error.finding.figures
            if figures is not None:
                record.max_abs, record.max_rel = figures.max_abs, figures.max_rel
        self._add(record)
        if result is not None:
            self._session.config.hook.pytest_aoti_check_done(item=self._item, result=result)

    def _measure(self, record: CheckRecord, program: AotiProgram, plan: _CheckPlan) -> None:
        """Engine and eager call times, and the profiler trace where one was asked for."""
        from pytest_aoti.checks.timing import call_times, write_profile

        device_args, device_kwargs = plan.input_sets[0]
        engine = plan.engine or program.engine_in_exported_state()
        record.engine_seconds, record.eager_seconds = call_times(
            program, engine, plan.module, device_args, device_kwargs
        )
        path = self._session.profile_path(self._item)
        if path is not None:
            record.profile = str(write_profile(path, program, engine, device_args, device_kwargs))

    def failed(self, program: AotiProgram, error: AotiCheckError) -> str | None:
        return self._session.write_bundle(self._item, program, error)

    def inferred(self, spec_text: str) -> None:
        self._session.record_inferred(self._item, spec_text)

    def _add(self, record: CheckRecord) -> None:
        record.worker = getattr(self._session.config, "workerinput", {}).get("workerid", "")
        self._session.collector.records.append(record)
        self._item.user_properties.extend(record.properties())
