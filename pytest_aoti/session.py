"""Per-session state: settings, resolved devices, the program registry, figures to report.

Registered as the ``aoti-session`` plugin, so its hook methods run like any plugin's. Heavy
parts (torch, the registry, the store) are created on first use: a run without AOTI tests
never imports torch.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from pytest_aoti.errors import AotiCheckError, AotiUsageError
from pytest_aoti.settings import AotiSettings

if TYPE_CHECKING:
    import torch

    from pytest_aoti.program import AotiProgram
    from pytest_aoti.registry import ProgramRegistry
    from pytest_aoti.store import ArtifactStore, CacheMode
    from pytest_aoti.tester import CheckDefaults, CheckResult

MARKER_OPTIONS = ("rtol", "atol", "strict", "inductor_configs", "examples", "max_dim")


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

    # -- lazily created parts ---------------------------------------------------------

    @property
    def devices(self) -> tuple[str, ...]:
        """``--aoti-device`` with ``auto`` resolved; imports torch on first use."""
        if self._devices is None:
            from pytest_aoti.devices import resolve_devices

            self._devices = resolve_devices(self.settings.devices)
        return self._devices

    @property
    def store(self) -> ArtifactStore | None:
        """The on-disk artifact store, or None when the cache is off or unavailable."""
        if not self._store_made:
            self._store_made = True
            root = self.cache_root()
            if root is not None and self.settings.cache_mode != "off":
                from pytest_aoti.store import ArtifactStore

                self._store = ArtifactStore(
                    root,
                    mode=cast("CacheMode", self.settings.cache_mode),
                    max_bytes=self.settings.cache_max_size,
                )
        return self._store

    @property
    def registry(self) -> ProgramRegistry:
        if self._registry is None:
            from pytest_aoti.registry import ProgramRegistry

            self._workdir = Path(tempfile.mkdtemp(prefix="pytest-aoti-"))
            self._registry = ProgramRegistry(self._workdir, self.store, self._program_ready)
        return self._registry

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

    def defaults_for(self, item: pytest.Item) -> CheckDefaults:
        """Settings merged with the test's ``@pytest.mark.aoti(...)`` options."""
        __tracebackhide__ = True
        from pytest_aoti.tester import CheckDefaults

        defaults = CheckDefaults(
            rtol=self.settings.rtol,
            atol=self.settings.atol,
            examples=self.settings.examples,
            max_dim=self.settings.max_dim,
            localize=self.settings.localize,
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

    def hook_inductor_configs(self, device: torch.device) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        for configs in reversed(
            self.config.hook.pytest_aoti_inductor_configs(config=self.config, device=device)
        ):
            merged.update(configs or {})
        return merged

    def check_done(self, item: pytest.Item, result: CheckResult) -> None:
        item.user_properties.append(("aoti_max_abs_error", result.max_abs))
        item.user_properties.append(("aoti_max_rel_error", result.max_rel))
        if result.examples:
            item.user_properties.append(("aoti_generated_examples", result.examples))
        self.config.hook.pytest_aoti_check_done(item=item, result=result)

    def check_failed(
        self, item: pytest.Item, program: AotiProgram, error: AotiCheckError
    ) -> str | None:
        """Keep a repro bundle of a failed check under ``--aoti-keep-failed``; return the
        line the failure report shows about it."""
        root = self.settings.keep_failed
        if root is None or error.replay is None:
            return None
        from pytest_aoti.repro import bundle_dir_name, write_bundle

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

    def record_inferred(self, item: pytest.Item, spec_text: str) -> None:
        """Keep a ``dynamic_shapes="auto"`` result where the user can copy it from: the
        terminal summary, the failure report and the JUnit properties."""
        item.user_properties.append(("aoti_inferred_dynamic_shapes", spec_text))
        item.add_report_section("call", "aoti inferred dynamic_shapes", spec_text)
        self.inferred.append((item.nodeid, spec_text))

    def _program_ready(self, program: AotiProgram) -> None:
        self.config.hook.pytest_aoti_program_ready(config=self.config, program=program)

    # -- hooks ----------------------------------------------------------------------------

    def pytest_report_header(self, config: pytest.Config) -> str:
        mode = self.settings.cache_mode
        where = self.settings.cache_dir or ".pytest_cache/d/aoti"
        if mode == "off":
            cache = "off"
        elif self.settings.cache_dir is None and getattr(config, "cache", None) is None:
            cache = "off (pytest's cache provider is disabled; --aoti-cache-dir sets one)"
        else:
            cache = f"{mode} at {where}"
        return f"aoti: device={','.join(self.settings.devices)}, cache={cache}"

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if self.settings.cache_clear and not _is_xdist_worker(self.config):
            store = self.store
            if store is not None:
                store.clear()

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if _is_xdist_worker(self.config):
            self.config.workeroutput["aoti_stats"] = self.stats_json()  # type: ignore[attr-defined]
            return
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
        line = self.summary_line()
        if line:
            terminalreporter.write_line(line)

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
            }
        stats = self._registry.stats
        return {**stats.to_json(), "programs": sorted(stats.programs), "inferred": self.inferred}

    def summary_line(self) -> str:
        """``aoti: 3 programs; 2 compiled in 14.1 s; 1 loaded from cache in 0.02 s``."""
        from pytest_aoti.registry import CompileStats

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


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


class XdistControllerHooks:
    """Collects workers' figures on the xdist controller; registered only with xdist."""

    def __init__(self, session: AotiSession) -> None:
        self._session = session

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        figures = getattr(node, "workeroutput", {}).get("aoti_stats")
        if figures:
            self._session.worker_stats.append(figures)
