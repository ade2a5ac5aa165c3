"""The stores of one pytest process: the local store, a plugin's remote store and the registry.
The remote opens at session start, the rest on first use (a run without AOTI tests creates no
cache folder and never imports torch)."""

from __future__ import annotations

import ctypes
import gc
import shutil
import tempfile
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest

from pytest_aoti.cache.history import KeyHistory
from pytest_aoti.cache.registry import CompileStats, CompileWatcher, ProgramRegistry, RemoteCache
from pytest_aoti.cache.served_tests import ServedTests
from pytest_aoti.cache.store import ArtifactStore, CacheMode

if TYPE_CHECKING:
    from pytest_aoti.compiling.program import AotiProgram
    from pytest_aoti.options.settings import AotiSettings


class RunStores:
    """The local store, the remote store and the registry of one pytest process. ``on_problem`` is
    told each cache problem (for the summary: a warning would fail a test under ``filterwarnings =
    error``), ``problems`` lists them; ``on_ready`` gets each program compiled or loaded."""

    def __init__(
        self,
        config: pytest.Config,
        settings: AotiSettings,
        *,
        on_problem: Callable[[str], None],
        problems: Sequence[str],
        watcher: Callable[[], CompileWatcher],
        on_ready: Callable[[AotiProgram], None],
    ) -> None:
        self._config = config
        self._settings = settings
        self._on_problem = on_problem
        self._problems = problems
        self._watcher = watcher
        self._on_ready = on_ready
        self._store: ArtifactStore | None = None
        self._store_made = False
        self._registry: ProgramRegistry | None = None
        self._workdir: Path | None = None
        self._history: KeyHistory | None = None
        self._served: ServedTests | None = None

    @property
    def _is_worker(self) -> bool:
        return hasattr(self._config, "workerinput")

    @property
    def store(self) -> ArtifactStore | None:
        """The on-disk artifact store, or None when the cache is off or unavailable."""
        if not self._store_made:
            self._store_made = True
            root = self.cache_root()
            if root is not None and self._settings.cache_mode != "off":
                self._store = ArtifactStore(
                    root,
                    mode=cast("CacheMode", self._settings.cache_mode),
                    max_bytes=self._settings.cache_max_size,
                    on_problem=self._on_problem,
                )
        return self._store

    @cached_property
    def remote(self) -> RemoteCache | None:
        """The store shared with other machines (``pytest_aoti_remote_store``), or None."""
        remote: RemoteCache | None = self._config.hook.pytest_aoti_remote_store(
            config=self._config, on_problem=self._on_problem
        )
        return remote

    @property
    def registry(self) -> ProgramRegistry:
        """Compiles each program once per process, asking the stores first."""
        if self._registry is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="pytest-aoti-"))
            self._registry = ProgramRegistry(
                self._workdir, self.store, self._on_ready, self._watcher(), remote=self.remote
            )
        return self._registry

    def cache_root(self) -> Path | None:
        """``--aoti-cache-dir``, else pytest's cache folder ``aoti`` (made private), else None."""
        if self._settings.cache_dir is not None:
            return self._settings.cache_dir
        cache = getattr(self._config, "cache", None)
        if cache is None:  # -p no:cacheprovider
            return None
        try:
            root = Path(cache.mkdir("aoti"))
        except OSError as error:
            self._on_problem(f"pytest-aoti cache off for this run: {error}")
            return None
        # pytest creates it under the umask; the store refuses one others can write: make it private
        root.chmod(0o700)
        return root

    def check_cache_dir(self) -> None:
        """Open ``--aoti-cache-dir``'s store now: an unusable one is a usage error at startup."""
        where = self._settings.cache_dir
        if where is None or self._settings.cache_mode == "off" or self._is_worker:
            return
        if self.store is None or self.store.readable:
            return
        reason = self._problems[-1] if self._problems else f"{where} cannot be used"
        raise pytest.UsageError(
            f"--aoti-cache-dir={where}: {reason}; pass a directory you can write to "
            "(or --aoti-cache=off)"
        )

    def cache_state(self) -> str:
        """``readwrite at DIR``, ``read at DIR (why)`` or ``off (why)``, creating nothing."""
        mode = self._settings.cache_mode
        if mode == "off":
            return "off"
        if self._settings.cache_dir is None:
            if getattr(self._config, "cache", None) is None:
                return "off (pytest's cache provider is disabled; --aoti-cache-dir sets one)"
            if not self._store_made:
                return f"{mode} at .pytest_cache/d/aoti"
        store = self.store
        why = self._problems[-1] if self._problems else "unusable"
        if store is None or not store.readable:
            return f"off ({why})"
        if mode == "readwrite" and not store.writable:
            return f"read at {store.root} ({why})"
        return f"{mode} at {store.root}"

    def reseeded(self, test: str, check: int, program: AotiProgram) -> bool:
        """Whether ``program`` compiled only for weights changed since ``test``'s last run."""
        cache = getattr(self._config, "cache", None)
        if cache is None:
            return False
        if self._history is None:
            self._history = KeyHistory(Path(cache.mkdir("aoti-keys")))
        compiled = program.first_use and not program.cache_hit
        return self._history.observe(test, check, program.key_parts, compiled)

    def served_before(self, test: str) -> Path | None:
        """The verified package of the program the engine child served ``test`` on its last
        run, if the store still holds it; None otherwise."""
        served, store = self._served_tests(), self.store
        key = served.served_before(test) if served is not None else None
        if key is None or store is None:
            return None
        try:
            entry = store.lookup(key)
        except ValueError:  # not a key of this store's format
            return None
        return entry.package_path if entry is not None else None

    def served_any(self) -> bool:
        """Whether the engine child served any test on the last run of this cache (read
        where the cache would be: nothing is made)."""
        if self._settings.cache_mode == "off":
            return False
        root = self._settings.cache_dir
        if root is None:
            cachedir = getattr(getattr(self._config, "cache", None), "_cachedir", None)
            if cachedir is None:
                return False
            root = Path(cachedir) / "d" / "aoti"  # where cache.mkdir("aoti") puts it
        return ServedTests(root).any()

    def note_served(self, test: str, key: str | None) -> None:
        """Record the key of the program the engine child served ``test`` this run (None:
        none)."""
        found = self._served_tests()
        if found is not None:
            found.note(test, key)

    def _served_tests(self) -> ServedTests | None:
        store = self.store
        if store is None or not store.writable:
            return None
        if self._served is None:
            self._served = ServedTests(store.root)
        return self._served

    def hypothesis_database(self) -> Path | None:
        """Where Hypothesis keeps failing generated shapes: pytest's cache dir."""
        cache = getattr(self._config, "cache", None)
        return None if cache is None else Path(cache.mkdir("aoti-hypothesis"))

    @property
    def stats(self) -> CompileStats | None:
        """What this process spent on programs; None before it compiled anything."""
        return None if self._registry is None else self._registry.stats

    def start(self) -> None:
        """Open the remote store and clear the local one for ``--aoti-cache-clear``."""
        self.remote  # noqa: B018 - opening it is the point
        if self._settings.cache_clear and not self._is_worker and self.store is not None:
            self.store.clear()

    def evict(self, workers_used_programs: bool) -> None:
        """Evict the store to its limit, once, in the reporting process (once a program was used)."""
        store = self.store if self._store is not None or workers_used_programs else None
        if store is not None and store.writable:
            store.evict()

    def after_test(self) -> None:
        """Return the heap pages a test's eager runs and copies freed."""
        if self._registry is not None:
            _return_freed_heap()

    def close(self) -> None:
        """Free the engines kept loaded (each removes the folder it unpacked its package to:
        kept to the interpreter's exit, they are never freed) and remove the registry's
        working folder."""
        engines = self._registry.engines if self._registry is not None else None
        # a full collection walks every object the compiler left: only for an engine a
        # reference cycle still holds
        if engines is not None and engines.clear() and engines.alive:
            gc.collect()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)


def _return_freed_heap() -> None:
    """Return freed heap pages to the system (glibc keeps them); needs ``malloc_trim``."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)
