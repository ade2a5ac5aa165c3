"""The stores of one pytest process: the local store, the fleet's remote store and the
registry that compiles through them, from opening to closing.

The remote is opened at session start (a missing package or a bad key is a usage error
then), the local store and the registry on first use: a run without AOTI tests never
creates pytest's cache folder or imports torch. At the end the store is evicted to its
size limit, once, by the process that reports (the xdist controller), and the registry's
working folder is removed.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

if TYPE_CHECKING:
    from pytest_aoti.cache.history import KeyHistory
    from pytest_aoti.cache.registry import CompileStats, CompileWatcher, ProgramRegistry
    from pytest_aoti.cache.remote.store import RemoteStore
    from pytest_aoti.cache.store import ArtifactStore, CacheMode
    from pytest_aoti.compiling.program import AotiProgram
    from pytest_aoti.options.settings import AotiSettings


class RunStores:
    """The local store, the remote store and the registry of one pytest process.

    ``on_problem`` is told each cache problem the stores repair or work around (listed in
    the terminal summary, never a warning: under ``filterwarnings = error`` it would fail
    a test that then passes on the next run); ``problems`` is where they are listed, the
    last one quoted as the reason of a store that is off. ``watcher`` makes what is told
    about each compile; ``on_ready`` is called with each program the registry compiled or
    loaded.
    """

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
        self._remote: RemoteStore | None = None
        self._remote_made = False
        self._registry: ProgramRegistry | None = None
        self._workdir: Path | None = None
        self._history: KeyHistory | None = None

    @property
    def _is_worker(self) -> bool:
        return hasattr(self._config, "workerinput")

    # -- the stores, each made on first use ---------------------------------------------

    @property
    def store(self) -> ArtifactStore | None:
        """The on-disk artifact store, or None when the cache is off or unavailable."""
        if not self._store_made:
            self._store_made = True
            root = self.cache_root()
            if root is not None and self._settings.cache_mode != "off":
                from pytest_aoti.cache.store import ArtifactStore

                self._store = ArtifactStore(
                    root,
                    mode=cast("CacheMode", self._settings.cache_mode),
                    max_bytes=self._settings.cache_max_size,
                    on_problem=self._on_problem,
                )
        return self._store

    @property
    def remote(self) -> RemoteStore | None:
        """The fleet's remote store (``--aoti-cache-url``), or None when there is none."""
        if not self._remote_made:
            self._remote_made = True
            settings = self._settings
            if settings.cache_url and settings.cache_remote != "off":
                from pytest_aoti.cache.remote.open import open_remote

                self._remote = open_remote(
                    settings.cache_url,
                    mode=settings.cache_remote,
                    ini_options=settings.cache_storage_options,
                    ini_trusted=[
                        str(self._config.rootpath / p) for p in settings.cache_trusted_keys
                    ],
                    on_problem=self._on_problem,
                    not_before=settings.cache_not_before,
                )
        return self._remote

    @property
    def registry(self) -> ProgramRegistry:
        """Compiles each program once per process, asking the stores first."""
        if self._registry is None:
            from pytest_aoti.cache.registry import ProgramRegistry

            self._workdir = Path(tempfile.mkdtemp(prefix="pytest-aoti-"))
            self._registry = ProgramRegistry(
                self._workdir, self.store, self._on_ready, self._watcher(), remote=self.remote
            )
        return self._registry

    # -- the cache folder -----------------------------------------------------------------

    def cache_root(self) -> Path | None:
        """``--aoti-cache-dir``, else pytest's cache folder ``aoti`` (made private); None
        without either."""
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
        # pytest creates it under the umask (0o775 under umask 002); it is ours, and the
        # store refuses a directory others can write to: make it private
        root.chmod(0o700)
        return root

    def check_cache_dir(self) -> None:
        """Open the store of ``--aoti-cache-dir`` now: a directory it cannot use at all is a
        usage error at startup, not a cache that quietly turns itself off."""
        where = self._settings.cache_dir
        if where is None or self._settings.cache_mode == "off" or self._is_worker:
            return
        store = self.store
        if store is None or store.readable:
            return
        reason = self._problems[-1] if self._problems else f"{where} cannot be used"
        raise pytest.UsageError(
            f"--aoti-cache-dir={where}: {reason}; pass a directory you can write to "
            "(or --aoti-cache=off)"
        )

    def cache_state(self) -> str:
        """The cache as the run will use it, for the header: ``readwrite at DIR``,
        ``read at DIR (why)`` or ``off (why)``.

        pytest's own cache folder is not created for the header: a run without AOTI tests
        leaves no ``.pytest_cache/d/aoti`` behind."""
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
        """Whether ``program`` was compiled only because its weights changed since the
        last run of ``test`` (see :mod:`pytest_aoti.cache.history`)."""
        cache = getattr(self._config, "cache", None)
        if cache is None:
            return False
        if self._history is None:
            from pytest_aoti.cache.history import KeyHistory

            self._history = KeyHistory(Path(cache.mkdir("aoti-keys")))
        compiled = program.first_use and not program.cache_hit
        return self._history.observe(test, check, program.key_parts, compiled)

    def hypothesis_database(self) -> Path | None:
        """Where Hypothesis keeps failing generated shapes: pytest's cache dir."""
        cache = getattr(self._config, "cache", None)
        return None if cache is None else Path(cache.mkdir("aoti-hypothesis"))

    # -- figures ----------------------------------------------------------------------------

    @property
    def stats(self) -> CompileStats | None:
        """What this process spent on programs; None before it compiled anything."""
        return None if self._registry is None else self._registry.stats

    @property
    def remote_stats(self) -> dict[str, Any] | None:
        """The remote store's figures (``RemoteStats.to_json()``); None without one."""
        return None if self._remote is None else self._remote.stats.to_json()

    # -- the session's start and end -------------------------------------------------------

    def start(self) -> None:
        """Open the remote store (a missing package or a bad key is a usage error now) and
        clear the local store for ``--aoti-cache-clear``."""
        self.remote  # noqa: B018 - opening it is the point
        if self._settings.cache_clear and not self._is_worker:
            store = self.store
            if store is not None:
                store.clear()

    def evict(self, workers_used_programs: bool) -> None:
        """Bring the store down to its size limit, once, in the process that reports: on
        the xdist controller, which compiles nothing itself and so has no store yet, as
        soon as a worker used a program."""
        used = self._store is not None or workers_used_programs
        store = self.store if used else None
        if store is not None and store.writable:
            store.evict()

    def after_test(self) -> None:
        """After a test that asked for programs: hand the heap pages its eager runs and
        copies freed back to the system."""
        if self._registry is not None:
            _return_freed_heap()

    def close(self) -> None:
        """Remove the registry's working folder."""
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)


def _return_freed_heap() -> None:
    """glibc keeps freed heap pages otherwise, about a quarter of a large model's size per
    program (measured with ``benchmarks/bench_memory.py``). A no-op where the C library
    has no ``malloc_trim``."""
    import ctypes

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)
