"""Compile each program once: this session's programs, then the local store (under a
cross-process lock), then the remote store, then a compile. A compiled package goes to the local
store at once, and to the remote one only after a check of it passed here."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from pytest_aoti.cache.key import program_key
from pytest_aoti.cache.store_files import link_or_copy, sha256_of, unchanged_since_hashed
from pytest_aoti.compiling.pipeline import compile_package, decompose, load_engine
from pytest_aoti.compiling.program import AotiProgram, CompiledArtifact, EnginePool, ProgramKey
from pytest_aoti.errors import AotiCompileError
from pytest_aoti.mutation_maps import MutationSignature, read_signature

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram

    from pytest_aoti.cache.store import ArtifactStore, CacheEntry
    from pytest_aoti.cache.weight_digests import WeightDigests


class RemoteFetched(Protocol):
    """A package a :class:`RemoteCache` downloaded and verified."""

    caller: dict[str, Any]
    """The metadata the publisher's registry recorded (signature maps, compile time)."""
    seconds: float


class RemoteCache(Protocol):
    """A shared store behind the local one (the ``pytest_aoti_remote_store`` hook's)."""

    def fetch(self, key: str, destination: Path) -> RemoteFetched | None:
        """Download the verified package of ``key`` to ``destination``; None on a miss."""

    def reject(
        self, key: str, reason: str, *, fetched: bool = False, repairable: bool = False
    ) -> None:
        """An entry that must not be used, and why."""

    def publish(self, key: str, package_file: Path, caller: Mapping[str, Any]) -> bool:
        """Upload a package a passing check used; never raises."""


class CompileWatcher(Protocol):
    """Told about each compile the registry starts (the reports show long ones)."""

    def compiling(self, test: str, program: str, device: str) -> AbstractContextManager[None]:
        """A context that lasts as long as the compile of ``program`` for ``test``."""


@dataclass
class CompileStats:
    """What a session spent on programs; workers' are added by :meth:`merge`."""

    programs: set[str] = field(default_factory=set)
    compiled: int = 0
    compile_seconds: float = 0.0
    loaded: int = 0
    load_seconds: float = 0.0
    """Seconds the loads took: each package found, verified and linked from the local store,
    or downloaded and loaded once on arrival (0 where none was measured)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "programs": len(self.programs),
            "compiled": self.compiled,
            "compile_seconds": round(self.compile_seconds, 3),
            "loaded": self.loaded,
            "load_seconds": round(self.load_seconds, 6),  # a local load takes about a ms
        }

    def payload(self) -> dict[str, Any]:
        """:meth:`to_json` with the program keys (a program two workers used counts once)."""
        return {**self.to_json(), "programs": sorted(self.programs)}

    @classmethod
    def from_payload(cls, data: Mapping[str, Any]) -> CompileStats:
        return cls(
            programs=set(data.get("programs", ())),
            compiled=int(data.get("compiled", 0)),
            compile_seconds=float(data.get("compile_seconds", 0.0)),
            loaded=int(data.get("loaded", 0)),
            load_seconds=float(data.get("load_seconds", 0.0)),
        )

    def merge(self, other: CompileStats) -> None:
        """Add another process's figures."""
        self.programs |= other.programs
        self.compiled += other.compiled
        self.compile_seconds += other.compile_seconds
        self.loaded += other.loaded
        self.load_seconds += other.load_seconds

    def summary_line(self) -> str:
        """``aoti: 3 programs; 2 compiled in 14.1 s; 1 loaded from cache in 1.2 ms``: the load
        time as measured, never rounded to nothing; left out where loads were counted but no
        time was (a shard's report without it). Empty without programs."""
        count = len(self.programs)
        if not count:
            return ""
        loaded = f"{self.loaded} loaded from cache"
        if self.load_seconds > 0:
            loaded += f" in {_short_seconds(self.load_seconds)}"
        elif not self.loaded:
            loaded += " in 0.00 s"
        return (
            f"aoti: {count} program{'s' if count != 1 else ''}; "
            f"{self.compiled} compiled in {self.compile_seconds:.1f} s; {loaded}"
        )


def _short_seconds(seconds: float) -> str:
    """``0.41 s``; below 10 ms in milliseconds, two digits (``1.2 ms``, ``0.31 ms``)."""
    if seconds >= 0.01:
        return f"{seconds:.2f} s"
    return f"{seconds * 1000:.2g} ms"


_CompileStats = CompileStats


class ProgramRegistry:
    """Hands out :class:`AotiProgram` objects, compiling each distinct program once; it keeps only
    the package, its metadata and recent engines (exported programs live with the test's)."""

    CompileStats: TypeAlias = _CompileStats
    """What a session spent on programs (its :attr:`stats`), as reports and merges read it."""

    def __init__(
        self,
        workdir: Path,
        store: ArtifactStore | None = None,
        on_compiled: Callable[[AotiProgram], None] | None = None,
        progress: CompileWatcher | None = None,
        *,
        remote: RemoteCache | None = None,
    ) -> None:
        self._workdir = workdir
        self._store = store
        self._remote = remote
        self._on_compiled = on_compiled
        self._progress = progress
        self._artifacts: dict[str, CompiledArtifact] = {}
        self._lock = threading.Lock()
        self.engines = EnginePool()
        self.stats = CompileStats()
        self._sidecars: dict[tuple[str, str], dict[str, Any]] = {}
        self._unpublished: dict[str, tuple[Path, dict[str, Any]]] = {}
        """Programs compiled here, waiting for a check to pass before they are published."""

    def check_passed(self, program: AotiProgram) -> None:
        """Publish ``program`` if this process compiled it and no check of it failed."""
        with self._lock:
            pending = self._unpublished.pop(program.key, None)
        if pending is not None and self._remote is not None:
            self._remote.publish(program.key, *pending)

    def check_failed(self, program: AotiProgram) -> None:
        """A check of ``program`` failed here: it is never published from this process."""
        with self._lock:
            self._unpublished.pop(program.key, None)

    def attached(self, key: str, name: str) -> dict[str, Any] | None:
        """Data kept with a package (``name`` e.g. ``probes``): the session's, else the store's."""
        with self._lock:
            data = self._sidecars.get((key, name))
        if data is None and self._store is not None and self._store.readable:
            data = self._store.read_sidecar(key, name)
            if data is not None:
                with self._lock:
                    self._sidecars[(key, name)] = data
        return data

    def attach(self, key: str, name: str, data: Mapping[str, Any]) -> None:
        """Keep ``data`` with a program's package, for this session and in the store."""
        with self._lock:
            self._sidecars[(key, name)] = dict(data)
        if self._store is not None and self._store.writable:
            self._store.write_sidecar(key, name, data)

    def program_for(
        self,
        exported: ExportedProgram,
        *,
        device: torch.device,
        inductor_configs: Mapping[str, Any] | None,
        label: str = "",
        after_compile: Callable[[Path], object] | None = None,
        weight_digests: WeightDigests | None = None,
        before_compile: Callable[[], object] | None = None,
    ) -> AotiProgram:
        """An engine-backed program for ``exported``, compiled at most once per key; where it
        compiles, ``before_compile()`` is called as the compile starts and
        ``after_compile(package)`` as soon as the package is written (before it is stored).
        ``weight_digests``: the weights' digests, taken meanwhile."""
        store = self._store if self._store is not None and self._store.readable else None
        key = program_key(
            exported,
            device=device,
            inductor_configs=inductor_configs,
            machine_dir=store.root if store is not None else None,
            machine_read_only=store is None or not store.writable,
            weight_digests=weight_digests,
        )
        decomposed = None
        with self._lock:
            artifact = self._artifacts.get(key.digest)
            fresh = artifact is None
            if artifact is None:
                progress = (
                    self._progress.compiling(label, key.digest, str(device))
                    if self._progress is not None
                    else contextlib.nullcontext()
                )
                with progress:
                    artifact, decomposed = self._obtain(
                        key, exported, inductor_configs, device, after_compile, before_compile
                    )
                self._artifacts[key.digest] = artifact
            self.stats.programs.add(key.digest)
        # kept by this request's program only: localizing needs it, and it goes with the test
        program = AotiProgram(
            exported, artifact, device, first_use=fresh, decomposed=decomposed, engines=self.engines
        )
        if fresh and self._on_compiled is not None:
            self._on_compiled(program)
        return program

    def _obtain(
        self,
        key: ProgramKey,
        exported: ExportedProgram,
        inductor_configs: Mapping[str, Any] | None,
        device: torch.device,
        after_compile: Callable[[Path], object] | None = None,
        before_compile: Callable[[], object] | None = None,
    ) -> tuple[CompiledArtifact, ExportedProgram | None]:
        """The artifact of ``key``, and the decomposed program where it was compiled."""
        store = self._store if key.persistable else None
        remote = self._remote if key.persistable else None
        if store is not None and not store.readable:
            store = None
        with store.locked(key.digest) if store is not None else contextlib.nullcontext():
            started = time.perf_counter()  # a load's time: the lookup's verification included
            if store is not None and (entry := store.lookup(key.digest)) is not None:
                artifact = self._from_entry(key, store, entry, started)
                if artifact is not None:
                    return artifact, None
            if remote is not None:
                artifact = self._from_remote(key, remote, store, device)
                if artifact is not None:
                    return artifact, None
            if before_compile is not None:
                before_compile()
            artifact, decomposed = self._compile(key, exported, inductor_configs)
            if after_compile is not None:
                after_compile(artifact.package_path)
            metadata = _entry_metadata(artifact)
            if store is not None and store.writable:
                store.store(key.digest, artifact.package_path, metadata)
            if remote is not None:
                self._unpublished[key.digest] = (artifact.package_path, metadata)
            return artifact, decomposed

    def _from_remote(
        self,
        key: ProgramKey,
        remote: RemoteCache,
        store: ArtifactStore | None,
        device: torch.device,
    ) -> CompiledArtifact | None:
        """Download a package from the remote store, check it loads here, and keep it locally."""
        started = time.perf_counter()
        local = self._workdir / f"{key.digest}.pt2"
        fetched = remote.fetch(key.digest, local)
        if fetched is None:
            return None
        try:
            signature = MutationSignature.from_json(fetched.caller["signature"])
            compile_seconds = float(fetched.caller.get("compile_seconds", 0.0))
        except (LookupError, TypeError, ValueError) as error:
            remote.reject(
                key.digest,
                f"its metadata is not usable by this version ({type(error).__name__}: {error})",
                fetched=True,
            )
            local.unlink(missing_ok=True)
            return None
        size = local.stat().st_size
        # another machine's package may not load here: compile instead, and keep it out of the cache
        try:
            engine = load_engine(local, device)
        except AotiCompileError as error:
            first = (str(error).splitlines() or [""])[0][:200]
            remote.reject(
                key.digest, f"its package does not load on this machine ({first})", fetched=True
            )
            local.unlink(missing_ok=True)
            return None
        if not signature.mutated_buffers:  # the engine pool's first engine of the program
            self.engines.get(key.digest, device, size, lambda: engine)
        if store is not None and store.writable:
            store.store(key.digest, local, fetched.caller)
        seconds = time.perf_counter() - started  # the download, its checks and the load here
        return self._loaded(key, local, signature, compile_seconds, size, seconds, "remote")

    def _compile(
        self, key: ProgramKey, exported: ExportedProgram, inductor_configs: Mapping[str, Any] | None
    ) -> tuple[CompiledArtifact, ExportedProgram]:
        started = time.perf_counter()
        decomposed = decompose(exported)
        package = compile_package(decomposed, self._workdir / f"{key.digest}.pt2", inductor_configs)
        seconds = time.perf_counter() - started
        self.stats.compiled += 1
        self.stats.compile_seconds += seconds
        artifact = CompiledArtifact(
            key=key,
            package_path=package,
            signature=read_signature(decomposed),
            compile_seconds=seconds,
            cache_hit=False,
            package_bytes=package.stat().st_size,
        )
        return artifact, decomposed

    def _from_entry(
        self, key: ProgramKey, store: ArtifactStore, entry: CacheEntry, started: float
    ) -> CompiledArtifact | None:
        """Link a stored package here (a copy where links are refused), so that later store
        changes cannot touch it; read it again only if it is not the file the store verified.
        ``started``: when its lookup began, the start of the load's time."""
        local = self._workdir / f"{key.digest}.pt2"
        problem = None
        try:
            local.parent.mkdir(parents=True, exist_ok=True)
            local.unlink(missing_ok=True)
            # the entry can vanish after lookup: another process's clear takes no lock
            link_or_copy(entry.package_path, local)
            st = local.stat()
            size = st.st_size
            verified = unchanged_since_hashed(st, entry.metadata)
            if not verified and sha256_of(local) != entry.metadata.get("sha256"):
                problem = "changed while it was read"
            caller = entry.metadata["caller"]
            signature = MutationSignature.from_json(caller["signature"])
            compile_seconds = float(caller.get("compile_seconds", 0.0))
        except OSError as error:
            problem = f"could not be read: {error}"
        except (LookupError, TypeError, ValueError) as error:
            problem = f"has metadata this version cannot use ({type(error).__name__}: {error})"
        if problem is not None:
            # repaired by compiling: a summary problem, never a warning (filterwarnings=error)
            store.report(f"pytest-aoti cache entry {key.digest} {problem}; recompiling")
            local.unlink(missing_ok=True)
            return None
        seconds = time.perf_counter() - started
        return self._loaded(key, local, signature, compile_seconds, size, seconds, "local")

    def _loaded(
        self,
        key: ProgramKey,
        local: Path,
        signature: MutationSignature,
        compile_seconds: float,
        size: int,
        seconds: float,
        source: str,
    ) -> CompiledArtifact:
        """A package taken from a store instead of compiled: counted, then described."""
        self.stats.loaded += 1
        self.stats.load_seconds += seconds
        return CompiledArtifact(
            key=key,
            package_path=local,
            signature=signature,
            compile_seconds=compile_seconds,
            cache_hit=True,
            package_bytes=size,
            source=source,
        )


def _entry_metadata(artifact: CompiledArtifact) -> dict[str, Any]:
    import torch  # torch loads on first use

    return {
        "key_parts": artifact.key.parts,
        "signature": artifact.signature.to_json(),
        "compile_seconds": round(artifact.compile_seconds, 3),
        "torch_version": torch.__version__,
    }
