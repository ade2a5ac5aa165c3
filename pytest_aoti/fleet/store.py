"""A remote tier behind the local artifact store, shared by a CI fleet through fsspec.

Layout under the URL (``s3://bucket/prefix``, ``gs://…``, ``az://…``, ``file:///…``;
``https://…`` is read-only)::

    URL/v1/<key>/package-<sha256>.pt2   the package: immutable, named by its checksum
    URL/v1/<key>/manifest.json          the signed entry (:mod:`.manifest`), written last

Publishing uploads the package first and the manifest last, each under a temporary name
then renamed (an object store's single put is atomic already), so a reader sees a whole
manifest or none, and a manifest names exactly one package by its checksum. A reader
verifies the manifest's signature before it downloads anything, and the package's size
and sha256 before it hands it out.

Faults never fail a test: every call runs behind one boundary (:mod:`.remote_guard`) with
a deadline; any exception or deadline passed is reported once (to ``on_problem``) and the
caller compiles. A call that passes its deadline, or :data:`SWITCH_OFF_AFTER` failed calls
in a row, switch the store off for the rest of the session. Reads are bounded: only
regular files are opened, the manifest is read up to its limit, a package up to its
signed size. Test runs never delete anything from the store.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from pytest_aoti.fleet.guard import RemoteFault, RemoteMissing, bounded, describe
from pytest_aoti.fleet.manifest import MANIFEST_LIMIT, Verdict, make_manifest, read_manifest
from pytest_aoti.fleet.redact import redact
from pytest_aoti.fleet.signing import Trust

__all__ = [
    "REMOTE_MODES",
    "Deadlines",
    "RemoteFetch",
    "RemoteStats",
    "RemoteStore",
    "protocol_of",
]

REMOTE_MODES = ("off", "read", "readwrite")
LAYOUT_VERSION = 1
MANIFEST_NAME = "manifest.json"
SWITCH_OFF_AFTER = 3
"""Failed calls in a row after which the store is off for the session."""
ATTEMPTS = 2
"""Tries of one call: a transient error gets one retry (a deadline passed gets none)."""
_CHUNK = 1 << 20
READ_ONLY_PROTOCOLS = frozenset({"http", "https"})
OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl"})
"""Protocols whose single put is atomic and that have no folders to create."""
_T = TypeVar("_T")


@dataclass(frozen=True)
class Deadlines:
    """Seconds each kind of store call may take, whatever the protocol."""

    call: float = 30.0
    """Looking up, reading a manifest, creating folders, renaming, writing a manifest."""
    transfer: float = 120.0
    """A package download or upload, plus :attr:`per_mib` for each MiB of it."""
    per_mib: float = 1.0

    def for_transfer(self, size: int) -> float:
        return self.transfer + self.per_mib * size / 2**20


@dataclass
class RemoteStats:
    """What one process did with the remote store; merged across xdist workers."""

    hits: int = 0
    misses: int = 0
    rejected: int = 0
    """Entries found but not loaded: unsigned, untrusted, tampered, damaged or revoked."""
    uploads: int = 0
    bytes_down: int = 0
    bytes_up: int = 0
    seconds_down: float = 0.0
    seconds_up: float = 0.0
    failures: int = 0
    """Calls that failed after their retries (unreachable, slow or denying store)."""
    timeouts: int = 0
    """Calls among :attr:`failures` that passed their deadline."""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["seconds_down"] = round(self.seconds_down, 3)
        data["seconds_up"] = round(self.seconds_up, 3)
        return data

    def merge(self, other: Mapping[str, Any]) -> None:
        for name in self.__dataclass_fields__:
            value = other.get(name, 0)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                setattr(self, name, getattr(self, name) + value)


@dataclass(frozen=True)
class RemoteFetch:
    """A package downloaded from the store and verified, and its signed metadata."""

    package_path: Path
    caller: dict[str, Any]
    """The metadata the publisher's registry recorded (signature maps, compile time)."""
    publisher: str
    """The key id that signed the entry."""
    seconds: float


class _Failed(Exception):
    """A call failed after its retries; already reported."""


class _Refused(Exception):
    """An entry must not be used: ``reason``, and whether a trusted publisher may replace it."""

    def __init__(self, reason: str, repairable: bool) -> None:
        super().__init__(reason)
        self.repairable = repairable


class RemoteStore:
    """The fleet's store at ``url``: lookups verify signatures, passing checks publish.

    ``fs`` is an fsspec filesystem and ``root`` the path in it that ``url`` names; with
    ``fs=None`` the store is off (it could not be opened). ``not_before``: entries signed
    earlier (seconds since the epoch) are refused and may be replaced.
    """

    def __init__(
        self,
        url: str,
        fs: Any,
        root: str,
        *,
        mode: str,
        trust: Trust,
        on_problem: Callable[[str], None],
        not_before: float | None = None,
        deadlines: Deadlines | None = None,
    ) -> None:
        if mode not in REMOTE_MODES:
            raise ValueError(f"remote cache mode must be one of {REMOTE_MODES}, not {mode!r}")
        self.url = redact(url)
        """The URL as it may be printed: credentials masked."""
        self.mode = mode
        self.trust = trust
        self.not_before = not_before
        self.deadlines = deadlines or Deadlines()
        self.stats = RemoteStats()
        self._fs = fs
        self._root = root.rstrip("/")
        self._on_problem = on_problem
        self._lock = threading.Lock()
        self._failures_in_a_row = 0
        self._off = mode == "off" or fs is None
        self._keep: set[str] = set()
        """Keys whose entry may be trusted elsewhere, or could not be read: never published over."""
        protocol = protocol_of(url)
        self.read_only_protocol = protocol in READ_ONLY_PROTOCOLS
        self._atomic_put = protocol in OBJECT_STORES

    def __repr__(self) -> str:
        return f"RemoteStore({self.url!r}, mode={self.mode!r}, off={self._off})"

    @property
    def readable(self) -> bool:
        """Whether a lookup can hit: on, not switched off, and some key is trusted."""
        return not self._off and self.trust.can_verify

    @property
    def writable(self) -> bool:
        """Whether a compile is published: readwrite, a signing key, a writable protocol."""
        return (
            not self._off
            and self.mode == "readwrite"
            and self.trust.can_sign
            and not self.read_only_protocol
        )

    def _entry_dir(self, key: str) -> str:
        return f"{self._root}/v{LAYOUT_VERSION}/{key}"

    # -- lookup ------------------------------------------------------------------------

    def fetch(self, key: str, destination: Path) -> RemoteFetch | None:
        """Download and verify ``key``'s package to ``destination``; None on a miss, a
        refused entry or a fault (each reported once). Never raises."""
        if not self.readable:
            return None
        started = time.perf_counter()
        try:
            verdict = self._read_entry(key)
            entry = verdict.entry
            assert entry is not None
            self._download(key, f"{self._entry_dir(key)}/{entry['package']}", destination, entry)
        except RemoteMissing:
            with self._lock:
                self.stats.misses += 1
            return None
        except _Refused as refused:
            self.reject(key, str(refused), repairable=refused.repairable)
            return None
        except _Failed:
            self._keep.add(key)  # unread, so possibly valid: not published over
            return None
        except Exception as error:  # the boundary: nothing a store holds fails a test
            self._keep.add(key)
            self._failed(f"read the entry of {key[:12]}", RemoteFault(describe(error)))
            return None
        seconds = time.perf_counter() - started
        with self._lock:
            self.stats.hits += 1
            self.stats.bytes_down += int(entry["size"])
            self.stats.seconds_down += seconds
        return RemoteFetch(destination, dict(entry["caller"]), verdict.publisher, seconds)

    def _read_entry(self, key: str) -> Verdict:
        """The trusted entry of ``key``; raises :class:`RemoteMissing` on a miss and
        :class:`_Refused` for an entry that must not be used."""
        path = f"{self._entry_dir(key)}/{MANIFEST_NAME}"
        info = self._call(f"look up the manifest of {key[:12]}", self._fs.info, path)
        _regular_file(info, "manifest", MANIFEST_LIMIT)
        raw = self._call(
            f"read the manifest of {key[:12]}", self._read_at_most, path, MANIFEST_LIMIT + 1
        )
        verdict = read_manifest(bytes(raw), key, self.trust, self.not_before)
        if verdict.entry is None:
            raise _Refused(verdict.reason, verdict.repairable)
        return verdict

    def _download(
        self, key: str, remote_path: str, destination: Path, entry: Mapping[str, Any]
    ) -> None:
        """The package into ``destination``, read up to its signed size and verified."""
        size = int(entry["size"])
        try:
            info = self._call(f"look up the package of {key[:12]}", self._fs.info, remote_path)
        except RemoteMissing:
            raise _Refused("its package is missing", repairable=True) from None
        _regular_file(info, "package", size)
        destination.parent.mkdir(parents=True, exist_ok=True)
        # a name of this call's own: a download abandoned at its deadline may still write
        partial = destination.with_name(f".{destination.name}.{uuid.uuid4().hex}.part")
        try:
            read, sha = self._call(
                f"download {key[:12]}",
                self._read_package,
                remote_path,
                partial,
                size,
                deadline=self.deadlines.for_transfer(size),
            )
            if read > size:  # read no further than one byte past it
                raise _Refused(
                    f"its package has more than the {size} bytes the signed entry says",
                    repairable=True,
                )
            if read < size:
                raise _Refused(
                    f"its package has {read} bytes, the signed entry says {size}", repairable=True
                )
            if sha != entry["sha256"]:
                raise _Refused(
                    "its package does not match the signed checksum (tampered or damaged)",
                    repairable=True,
                )
            os.replace(partial, destination)
        except RemoteMissing:
            raise _Refused("its package is missing", repairable=True) from None
        finally:
            partial.unlink(missing_ok=True)

    def _read_at_most(self, path: str, limit: int) -> bytes:
        """The first ``limit`` bytes of ``path``: never more, whatever it holds."""
        with self._fs.open(path, "rb") as source:
            data: bytes = source.read(limit)
        return data

    def _read_package(self, remote_path: str, partial: Path, size: int) -> tuple[int, str]:
        """Bytes read (at most ``size + 1``: more is refused) and their sha256."""
        digest = hashlib.sha256()
        read = 0
        with self._fs.open(remote_path, "rb") as source, open(partial, "wb") as target:
            while read <= size:
                chunk = source.read(min(_CHUNK, size + 1 - read))
                if not chunk:
                    break
                digest.update(chunk)
                target.write(chunk)
                read += len(chunk)
        return read, digest.hexdigest()

    def reject(
        self, key: str, reason: str, *, fetched: bool = False, repairable: bool = False
    ) -> None:
        """Count and report an entry that must not be used. ``repairable``: a publisher
        with a trusted key replaces it; else it is never published over. ``fetched``: it
        was downloaded (and counted as a hit) before it proved unusable."""
        with self._lock:
            self.stats.rejected += 1
            self.stats.hits -= fetched
            if not repairable:
                self._keep.add(key)
        action = "compiled locally" + (", to be replaced" if repairable and self.writable else "")
        self._problem(
            f"pytest-aoti remote cache entry {key} at {self.url} not loaded: {reason}; {action}"
        )

    # -- publish -----------------------------------------------------------------------

    def publish(self, key: str, package_file: Path, caller: Mapping[str, Any]) -> bool:
        """Upload a package and its signed manifest; True when published. Never raises.

        Nothing is published over an entry this session could not read, or found signed
        by a key it does not trust.
        """
        if not self.writable or key in self._keep:
            return False
        started = time.perf_counter()
        try:
            sha, size = _sha256_and_size(package_file)
            data = make_manifest(key, sha, size, caller, self.trust)
            entry_dir = self._entry_dir(key)
            if not self._atomic_put:
                self._call(f"create the folder of {key[:12]}", self._fs.makedirs, entry_dir, True)
            # the immutable package first, the manifest that names it last
            self._put(
                key, f"upload {key[:12]}", str(package_file), f"{entry_dir}/package-{sha}.pt2", size
            )
            self._put(
                key,
                f"write the manifest of {key[:12]}",
                data,
                f"{entry_dir}/{MANIFEST_NAME}",
                len(data),
            )
        except (_Failed, RemoteMissing):
            return False
        except Exception as error:  # the boundary, as in fetch
            self._failed(f"publish {key[:12]}", RemoteFault(describe(error)))
            return False
        with self._lock:
            self.stats.uploads += 1
            self.stats.bytes_up += size + len(data)
            self.stats.seconds_up += time.perf_counter() - started
        return True

    def _put(self, key: str, what: str, source: str | bytes, target: str, size: int) -> None:
        """``source`` (a local path, or bytes) at ``target``, seen whole or not at all."""
        deadline = self.deadlines.for_transfer(size)
        final = target
        if not self._atomic_put:
            target = f"{final}.{uuid.uuid4().hex}.tmp"
        if isinstance(source, bytes):
            self._call(what, self._fs.pipe_file, target, source, deadline=deadline)
        else:
            self._call(what, self._fs.put_file, source, target, deadline=deadline)
        if target != final:
            try:
                self._call(f"rename {what.split(' ', 1)[-1]}", self._fs.mv, target, final)
            except (_Failed, RemoteMissing):
                self._call_quietly(self._fs.rm_file, target)
                raise

    # -- faults ------------------------------------------------------------------------

    def _call(self, what: str, function: Callable[..., _T], *args: Any, deadline: float = 0) -> _T:
        """One store call behind the boundary, with a retry; :class:`RemoteMissing`
        passes through, any other failure is reported and raised as :class:`_Failed`."""
        if self._off:
            raise _Failed
        fault: RemoteFault | None = None
        for attempt in range(ATTEMPTS):
            try:
                result = bounded(function, *args, seconds=deadline or self.deadlines.call)
            except RemoteMissing:
                self._succeeded()
                raise
            except RemoteFault as failed:
                fault = failed
                if failed.timed_out or failed.denied:  # retrying changes nothing
                    break
                if attempt + 1 < ATTEMPTS:
                    time.sleep(0.2 * (attempt + 1))
                continue
            self._succeeded()
            return result
        assert fault is not None
        self._failed(what, fault)
        raise _Failed

    def _call_quietly(self, function: Callable[..., Any], *args: Any) -> None:
        try:
            bounded(function, *args, seconds=self.deadlines.call)
        except (RemoteFault, RemoteMissing):
            pass

    def _succeeded(self) -> None:
        with self._lock:
            self._failures_in_a_row = 0

    def _failed(self, what: str, fault: RemoteFault) -> None:
        with self._lock:
            self.stats.failures += 1
            self.stats.timeouts += fault.timed_out
            self._failures_in_a_row += 1
            # a store that hung once would cost every later test the deadline again
            limit = 1 if fault.timed_out else SWITCH_OFF_AFTER
            switch_off = self._failures_in_a_row >= limit and not self._off
            if switch_off:
                self._off = True
        self._problem(
            f"pytest-aoti remote cache {self.url}: could not {what} ({fault}); compiled locally"
        )
        if switch_off:
            why = (
                "a call passed its deadline"
                if fault.timed_out
                else (f"{SWITCH_OFF_AFTER} failed calls in a row")
            )
            self._problem(
                f"pytest-aoti remote cache {self.url} switched off for the rest of the session "
                f"after {why}"
            )

    def report(self, message: str) -> None:
        """Report a problem worked around by compiling locally; never raises."""
        self._problem(message)

    def _problem(self, message: str) -> None:
        try:
            self._on_problem(redact(message))
        except Exception:  # reporting must never fail a compile
            pass


def protocol_of(url: str) -> str:
    """The fsspec protocol of ``url`` (``file`` for a bare path)."""
    return url.split("://", 1)[0].lower() if "://" in url else "file"


def _regular_file(info: Any, what: str, limit: int) -> None:
    """Refuse what is not a regular file of at most ``limit`` bytes, before it is opened:
    a FIFO, a device or a folder would block or never end."""
    kind = info.get("type", "file") if isinstance(info, Mapping) else None
    if kind != "file":
        raise _Refused(f"its {what} is not a regular file ({kind})", repairable=False)
    size = info.get("size")
    if isinstance(size, int) and size > limit:
        raise _Refused(f"its {what} has {size} bytes, more than the {limit} it may have", True)


def _sha256_and_size(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size
