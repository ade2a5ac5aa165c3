"""A store of compiled ``.pt2`` packages, shared safely between processes and runs.

Packages are kept by a content key computed elsewhere; the store treats them as opaque
files. A package is native code loaded into the test process, so nothing is handed out
before it has been verified, and the store never follows a path it does not own.

Layout under ``root`` (``vN`` is ``v{FORMAT_VERSION}``; other versions' directories are
left alone, so plugin versions can share one root)::

    root/                          0o700, owned by the user
      v1/
        entries/<key>/package.pt2  the package, 0o600
        entries/<key>/meta.json    its metadata, 0o600
        locks/<key>.lock           per-key lock files; kept, they are empty
        tmp/                       staging area; leftovers older than an hour are swept

An entry is staged as a directory under ``tmp/`` (package copied and fsynced, then
``meta.json`` written and fsynced) and published by renaming the whole directory to
``entries/<key>``, so readers see a complete entry or none.

``meta.json`` holds ``format_version``, ``key``, ``sha256`` and ``size`` of the package,
``created`` and ``last_used`` (epoch seconds), and the caller's metadata, unchanged,
under ``caller``. :attr:`CacheEntry.metadata` is that whole object.

POSIX only: ownership and permission checks use ``os.getuid`` and mode bits.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

from filelock import FileLock, Timeout

from pytest_aoti.errors import AotiCacheWarning, warn_at_caller

__all__ = [
    "FORMAT_VERSION",
    "LOCK_TIMEOUT",
    "ArtifactStore",
    "CacheEntry",
    "CacheMode",
    "StoreStats",
    "validate_key",
]

FORMAT_VERSION: int = 1
CacheMode = Literal["off", "read", "readwrite"]

PACKAGE_NAME = "package.pt2"
META_NAME = "meta.json"
LOCK_TIMEOUT = 600.0
"""Seconds :meth:`ArtifactStore.locked` waits by default; far longer than one compile."""

_KEY_RE = re.compile(r"[0-9a-z][0-9a-z_-]{0,127}")
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_SIDECAR_RE = re.compile(r"[a-z][a-z0-9_]{0,31}")
_DIR_MODE = 0o700
_FILE_MODE = 0o600
_META_LIMIT = 1 << 20
_CHUNK = 1 << 20
_STALE_TMP_SECONDS = 3600.0
# Rewriting meta.json on every hit of a hot entry buys no useful recency information.
_TOUCH_INTERVAL = 60.0
# O_NONBLOCK keeps a FIFO planted in an entry from hanging the open.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_EXISTS_ERRNOS = frozenset({errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR})


def _now() -> float:
    """Clock for ``created``/``last_used``."""
    return time.time()


@dataclass(frozen=True)
class CacheEntry:
    """A verified entry of the store."""

    key: str
    package_path: Path
    """The package file inside the store; verified just now, safe to load."""
    metadata: dict[str, Any]
    """The stored ``meta.json``: the store's fields plus the caller's under ``caller``."""


@dataclass(frozen=True)
class StoreStats:
    """Size of the store's current format version."""

    entries: int
    total_bytes: int


@dataclass(frozen=True)
class _EntryInfo:
    key: str
    path: Path
    size: int
    last_used: float


class _Missing(Exception):
    """The entry does not exist (or vanished while being read)."""


class _Stale(Exception):
    """The entry was written under another format version."""


class _Damaged(Exception):
    """The entry's files do not match its metadata; safe to discard."""


class _Refused(Exception):
    """A path fails the ownership or permission checks; it is left in place."""


class _Unusable(Exception):
    """The store directories cannot be created or written."""


def validate_key(key: str) -> str:
    """Return ``key`` if it is a valid store key, else raise ``ValueError``.

    Keys are 1-128 characters of ``[0-9a-z_-]`` starting with a letter or digit, so a
    key is always a single, plain path component.
    """
    if not isinstance(key, str) or _KEY_RE.fullmatch(key) is None:
        raise ValueError(
            f"invalid cache key {key!r}: expected 1-128 characters of [0-9a-z_-], "
            "starting with a letter or digit"
        )
    return key


def _trust_problem(st: os.stat_result, *, directory: bool) -> str | None:
    """Why a path with this ``lstat``/``fstat`` result must not be trusted, if it must not."""
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link"
    if directory and not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    if not directory and not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != os.getuid():
        return f"owned by uid {st.st_uid}, not you"
    if st.st_mode & 0o022:
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):#o})"
    return None


def _hash_stream(f: BinaryIO) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    while chunk := f.read(_CHUNK):
        digest.update(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def sha256_of(path: Path) -> str:
    """sha256 of a file's content, as recorded in ``meta.json``."""
    with open(path, "rb") as f:
        return _hash_stream(f)[0]


def _hash_and_sync(path: Path) -> tuple[str, int]:
    """Hash the file as written, and flush it to disk before it can be published."""
    with open(path, "rb") as f:
        result = _hash_stream(f)
        os.fsync(f.fileno())
    return result


def _write_new_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, _FILE_MODE)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # some filesystems cannot fsync directories
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def _encode(meta: Mapping[str, Any]) -> bytes:
    return json.dumps(meta, indent=1, sort_keys=True, allow_nan=False).encode()


def _plain_json(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The caller's metadata as it will read back from ``meta.json``.

    Raises ``TypeError``/``ValueError`` for metadata JSON cannot hold: that is a bug in
    the caller, not a cache failure.
    """
    plain: dict[str, Any] = json.loads(json.dumps(dict(metadata), allow_nan=False))
    return plain


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _meta_field_problem(meta: Mapping[str, Any], key: str) -> str | None:
    if meta.get("key") != key:
        return f"key is {meta.get('key')!r}"
    sha = meta.get("sha256")
    if not isinstance(sha, str) or _SHA256_RE.fullmatch(sha) is None:
        return "bad 'sha256'"
    size = meta.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return "bad 'size'"
    for name in ("created", "last_used"):
        if not _is_number(meta.get(name)):
            return f"bad {name!r}"
    if not isinstance(meta.get("caller"), dict):
        return "bad 'caller'"
    return None


def _parse_meta(raw: bytes, key: str) -> dict[str, Any]:
    if len(raw) > _META_LIMIT:
        raise _Damaged("corrupt meta.json: larger than 1 MiB")
    try:
        meta = json.loads(raw)
    except ValueError as e:
        raise _Damaged(f"corrupt meta.json: {e}") from None
    if not isinstance(meta, dict):
        raise _Damaged("corrupt meta.json: not a JSON object")
    version = meta.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise _Damaged("corrupt meta.json: no format_version")
    if version != FORMAT_VERSION:
        raise _Stale(version)
    problem = _meta_field_problem(meta, key)
    if problem is not None:
        raise _Damaged(f"corrupt meta.json: {problem}")
    return meta


def _check_package(f: BinaryIO, meta: Mapping[str, Any]) -> None:
    expected = meta["size"]
    actual = os.fstat(f.fileno()).st_size
    if actual < expected:
        raise _Damaged(f"truncated: {actual} of {expected} bytes")
    if actual > expected:
        raise _Damaged(f"size mismatch: {actual} bytes, expected {expected}")
    digest, read = _hash_stream(f)
    if read != expected or digest != meta["sha256"]:
        raise _Damaged("checksum mismatch")


def _same_inode(path: Path, ino: int) -> bool:
    try:
        return os.lstat(path).st_ino == ino
    except OSError:
        return False


class ArtifactStore:
    """Compiled packages by content key, in a private directory shared between processes.

    Failures of the cache never fail a test: they are reported (to ``on_problem``, or as
    an :class:`AotiCacheWarning` without one) and the store behaves as a miss. An unusable
    or untrusted ``root`` turns the store off (or read-only) for the run, reported once.
    """

    def __init__(
        self,
        root: Path,
        *,
        mode: CacheMode = "readwrite",
        max_bytes: int = 4 * 2**30,
        on_problem: Callable[[str], None] | None = None,
    ) -> None:
        self._on_problem = on_problem
        if mode not in ("off", "read", "readwrite"):
            raise ValueError(f"cache mode must be 'off', 'read' or 'readwrite', not {mode!r}")
        self.root = Path(root).absolute()
        self.mode: CacheMode = mode
        self.max_bytes = max_bytes
        self._base = self.root / f"v{FORMAT_VERSION}"
        self._entries = self._base / "entries"
        self._locks = self._base / "locks"
        self._tmp = self._base / "tmp"
        self._warned: set[tuple[str, str]] = set()
        self._readable, self._writable = self._open()

    def __repr__(self) -> str:
        return (
            f"ArtifactStore({str(self.root)!r}, mode={self.mode!r}, "
            f"readable={self._readable}, writable={self._writable})"
        )

    @property
    def readable(self) -> bool:
        """Whether lookups can hit: False when off, refused or unusable."""
        return self._readable

    @property
    def writable(self) -> bool:
        """Whether :meth:`store`, :meth:`evict` and :meth:`clear` change anything."""
        return self._writable

    # -- opening ---------------------------------------------------------------------

    def _open(self) -> tuple[bool, bool]:
        if self.mode == "off":
            return False, False
        if self.mode == "read":
            # Read mode creates nothing: a missing root is simply an empty cache.
            problem = self._existing_dirs_problem()
            if problem is not None:
                self._warn(f"pytest-aoti cache refused, off for this run: {problem}")
                return False, False
            return True, False
        return self._open_for_writing()

    def _open_for_writing(self) -> tuple[bool, bool]:
        try:
            self._make_dirs()
            self._probe_write()
        except _Refused as e:
            self._warn(f"pytest-aoti cache refused, off for this run: {e}")
            return False, False
        except _Unusable as e:
            if self._entries_readable():
                self._warn(f"pytest-aoti cache {self.root} is read-only for this run: {e}")
                return True, False
            self._warn(f"pytest-aoti cache {self.root} is off for this run: {e}")
            return False, False
        return True, True

    def _store_dirs(self) -> tuple[Path, ...]:
        return (self._base, self._entries, self._locks, self._tmp)

    def _existing_dirs_problem(self) -> str | None:
        """Why the existing store directories must not be trusted; missing ones are fine."""
        for path in (self.root, *self._store_dirs()):
            try:
                # The root itself may be a symlink the user set up; nothing below it may.
                st = os.stat(path) if path == self.root else os.lstat(path)
            except FileNotFoundError:
                continue
            except OSError as e:
                return f"cannot inspect {path}: {e.strerror}"
            problem = _trust_problem(st, directory=True)
            if problem is not None:
                return f"{path} is {problem}"
        return None

    def _make_dirs(self) -> None:
        missing: list[Path] = []
        path = self.root
        while path != path.parent and not os.path.lexists(path):
            missing.append(path)
            path = path.parent
        for path in reversed(missing):
            self._make_dir(path)
        self._check_dir(self.root, follow=True)
        for path in self._store_dirs():
            self._make_dir(path)
            self._check_dir(path, follow=False)

    @staticmethod
    def _make_dir(path: Path) -> None:
        try:
            os.mkdir(path, _DIR_MODE)
        except FileExistsError:
            return  # existing, or made by a concurrent process; checked by the caller
        except OSError as e:
            raise _Unusable(f"cannot create {path}: {e.strerror or e}") from None
        # A restrictive umask may have dropped the owner's bits.
        with contextlib.suppress(OSError):
            os.chmod(path, _DIR_MODE)

    @staticmethod
    def _check_dir(path: Path, *, follow: bool) -> None:
        try:
            st = os.stat(path) if follow else os.lstat(path)
        except OSError as e:
            raise _Unusable(f"cannot inspect {path}: {e.strerror or e}") from None
        problem = _trust_problem(st, directory=True)
        if problem is not None:
            raise _Refused(f"{path} is {problem}")

    def _probe_write(self) -> None:
        try:
            fd, name = tempfile.mkstemp(prefix=".probe-", dir=self._tmp)
            os.close(fd)
            os.unlink(name)
        except OSError as e:
            raise _Unusable(f"cannot write in {self._tmp}: {e.strerror or e}") from None

    def _entries_readable(self) -> bool:
        if self._existing_dirs_problem() is not None:
            return False
        return self._entries.is_dir() and os.access(self._entries, os.R_OK | os.X_OK)

    # -- lookup ----------------------------------------------------------------------

    def lookup(self, key: str) -> CacheEntry | None:
        """Return the verified entry for ``key``, or None on a miss.

        The entry is checked before it is returned: metadata parses and has this format
        version, the package has the recorded size and sha256, and every path is owned by
        the current user and not writable by others. A damaged entry is discarded (when
        writable) with one warning; an untrusted one is left in place with one warning.
        A hit refreshes ``last_used``, best effort.
        """
        validate_key(key)
        if not self._readable:
            return None
        entry_dir = self._entries / key
        try:
            ino = self._entry_dir_inode(entry_dir)
            meta = self._verify(key, entry_dir, ino)
        except _Missing:
            return None
        except _Stale:
            if self._writable:
                self._discard(entry_dir, ino)
            return None
        except _Refused as e:
            self._warn_entry(key, str(e), "left it in place")
            return None
        except _Damaged as e:
            removed = self._writable and self._discard(entry_dir, ino)
            self._warn_entry(key, str(e), "removed it" if removed else "not using it")
            return None
        meta = self._touch(key, entry_dir, meta, ino)
        return CacheEntry(key=key, package_path=entry_dir / PACKAGE_NAME, metadata=meta)

    @staticmethod
    def _entry_dir_inode(entry_dir: Path) -> int:
        try:
            st = os.lstat(entry_dir)
        except FileNotFoundError:
            raise _Missing from None
        except OSError as e:
            raise _Refused(f"entry directory is unreadable: {e.strerror or e}") from None
        problem = _trust_problem(st, directory=True)
        if problem is not None:
            raise _Refused(f"entry directory is {problem}")
        return st.st_ino

    def _verify(self, key: str, entry_dir: Path, ino: int) -> dict[str, Any]:
        with contextlib.ExitStack() as stack:
            meta_file = self._open_entry_file(entry_dir, META_NAME, ino)
            if meta_file is None:
                raise _Damaged(f"{META_NAME} missing")
            stack.enter_context(meta_file)
            # Open (and ownership-check) the package before judging the metadata, so a
            # damaged entry is only discarded when everything in it is ours.
            package = self._open_entry_file(entry_dir, PACKAGE_NAME, ino)
            if package is not None:
                stack.enter_context(package)
            meta = _parse_meta(meta_file.read(_META_LIMIT + 1), key)
            if package is None:
                raise _Damaged(f"{PACKAGE_NAME} missing")
            _check_package(package, meta)
        return meta

    @staticmethod
    def _open_entry_file(entry_dir: Path, name: str, dir_ino: int) -> BinaryIO | None:
        """Open a file of a trusted entry dir; None if it is missing from that dir."""
        try:
            fd = os.open(entry_dir / name, _READ_FLAGS)
        except FileNotFoundError:
            if _same_inode(entry_dir, dir_ino):
                return None
            raise _Missing from None  # the entry was removed or replaced concurrently
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise _Refused(f"{name} is a symbolic link") from None
            raise _Refused(f"{name} is unreadable: {e.strerror or e}") from None
        f = os.fdopen(fd, "rb")
        problem = _trust_problem(os.fstat(fd), directory=False)
        if problem is not None:
            f.close()
            raise _Refused(f"{name} is {problem}")
        return f

    def _touch(self, key: str, entry_dir: Path, meta: dict[str, Any], ino: int) -> dict[str, Any]:
        """Record a hit in ``last_used``; recency is advisory, so failures are ignored."""
        now = _now()
        if not self._writable or now - meta["last_used"] < _TOUCH_INTERVAL:
            return meta
        updated = {**meta, "last_used": now}
        try:
            fd, name = tempfile.mkstemp(prefix=f"{key}.", suffix=".meta", dir=self._tmp)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(_encode(updated))
                # Never write this metadata over an entry published since verification.
                if not _same_inode(entry_dir, ino):
                    raise FileNotFoundError(entry_dir)
                os.replace(name, entry_dir / META_NAME)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(name)
                raise
        except OSError:
            return meta
        return updated

    # -- store -----------------------------------------------------------------------

    def store(self, key: str, package_file: Path, metadata: Mapping[str, Any]) -> CacheEntry | None:
        """Copy ``package_file`` into the store under ``key`` and return the new entry.

        ``metadata`` must be JSON-serializable; it is kept under ``metadata["caller"]``.
        The entry is published atomically and replaces an existing one of ours. Returns
        None when the store is not writable, or, with one warning, when storing fails;
        nothing half-written is left behind.
        """
        validate_key(key)
        caller = _plain_json(metadata)
        if not self._writable:
            return None
        try:
            return self._publish(key, Path(package_file), caller)
        except (OSError, _Refused) as e:
            self._warn(f"pytest-aoti could not store {key} in the cache: {e}")
            return None

    def _publish(self, key: str, package_file: Path, caller: dict[str, Any]) -> CacheEntry | None:
        staging = Path(tempfile.mkdtemp(prefix=f"{key}.", suffix=".new", dir=self._tmp))
        try:
            meta = self._stage(key, package_file, staging, caller)
            installed = self._install(key, staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        if not installed:
            # Another process published this key in the meantime; theirs is as good.
            shutil.rmtree(staging, ignore_errors=True)
            return self.lookup(key)
        return CacheEntry(key=key, package_path=self._entries / key / PACKAGE_NAME, metadata=meta)

    @staticmethod
    def _stage(
        key: str, package_file: Path, staging: Path, caller: dict[str, Any]
    ) -> dict[str, Any]:
        package = staging / PACKAGE_NAME
        shutil.copyfile(package_file, package)
        os.chmod(package, _FILE_MODE)  # copyfile creates it under the umask
        digest, size = _hash_and_sync(package)
        now = _now()
        meta: dict[str, Any] = {
            "format_version": FORMAT_VERSION,
            "key": key,
            "sha256": digest,
            "size": size,
            "created": now,
            "last_used": now,
            "caller": caller,
        }
        _write_new_file(staging / META_NAME, _encode(meta))
        _fsync_dir(staging)
        return meta

    def _install(self, key: str, staging: Path) -> bool:
        """Rename ``staging`` to the entry; False if a concurrent writer won the race."""
        target = self._entries / key
        try:
            os.rename(staging, target)
        except OSError as e:
            if e.errno not in _EXISTS_ERRNOS:
                raise
            self._clear_target(target)
            try:
                os.rename(staging, target)
            except OSError as e2:
                if e2.errno not in _EXISTS_ERRNOS:
                    raise
                return False
        _fsync_dir(self._entries)
        return True

    def _clear_target(self, target: Path) -> None:
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            return
        if st.st_uid != os.getuid():
            raise _Refused(f"the existing entry is owned by uid {st.st_uid}, not you")
        self._discard(target)

    # -- sidecar data ----------------------------------------------------------------

    def read_sidecar(self, key: str, name: str) -> dict[str, Any] | None:
        """The JSON object kept as ``<name>.json`` next to an entry's package (findings
        about the package, such as probe outcomes); None when missing or unusable.
        Advisory data: it is trust-checked like the entry, not checksummed."""
        validate_key(key)
        if not self._readable or not _SIDECAR_RE.fullmatch(name):
            return None
        entry_dir = self._entries / key
        try:
            ino = self._entry_dir_inode(entry_dir)
            file = self._open_entry_file(entry_dir, f"{name}.json", ino)
            if file is None:
                return None
            with file:
                data = json.loads(file.read(_META_LIMIT + 1))
        except (_Missing, _Refused, OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def write_sidecar(self, key: str, name: str, data: Mapping[str, Any]) -> bool:
        """Write ``data`` as ``<name>.json`` into the entry of ``key``, atomically; False
        when the store is not writable or the entry is gone."""
        validate_key(key)
        if not _SIDECAR_RE.fullmatch(name) or name == "meta":
            raise ValueError(f"bad sidecar name {name!r}")
        if not self._writable:
            return False
        entry_dir = self._entries / key
        try:
            ino = self._entry_dir_inode(entry_dir)
            fd, temp = tempfile.mkstemp(prefix=f"{key}.", suffix=f".{name}", dir=self._tmp)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(json.dumps(_plain_json(data), sort_keys=True).encode())
                if not _same_inode(entry_dir, ino):
                    raise FileNotFoundError(entry_dir)
                os.replace(temp, entry_dir / f"{name}.json")
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temp)
                raise
        except (_Missing, _Refused, OSError):
            return False
        return True

    # -- locking ---------------------------------------------------------------------

    def locked(
        self, key: str, timeout: float = LOCK_TIMEOUT
    ) -> contextlib.AbstractContextManager[None]:
        """Hold the cross-process lock of ``key``: compile and store inside it.

        A no-op when the store is not writable. If the lock cannot be had within
        ``timeout`` seconds, warns and goes on without it (the worst case is compiling
        the same package twice).
        """
        validate_key(key)
        if not self._writable:
            return contextlib.nullcontext()
        return self._hold_lock(key, timeout)

    def _lock_path(self, key: str) -> Path:
        return self._locks / f"{key}.lock"

    @contextlib.contextmanager
    def _hold_lock(self, key: str, timeout: float) -> Iterator[None]:
        lock = FileLock(self._lock_path(key), timeout=timeout, mode=_FILE_MODE)
        acquired = self._acquire(lock, key, timeout)
        try:
            yield
        finally:
            if acquired:
                lock.release()

    def _acquire(self, lock: FileLock, key: str, timeout: float) -> bool:
        try:
            lock.acquire()
        except Timeout:
            self._warn(
                f"pytest-aoti waited {timeout:g} s for the cache lock of {key}; going on without it"
            )
            return False
        except OSError as e:
            self._warn(
                f"pytest-aoti could not take the cache lock of {key}: {e}; going on without it"
            )
            return False
        return True

    def _is_locked(self, key: str) -> bool:
        """Whether some process (this one included) holds ``key``'s lock right now."""
        probe = FileLock(self._lock_path(key), timeout=0, mode=_FILE_MODE)
        try:
            probe.acquire()
        except (Timeout, OSError):
            return True
        probe.release()
        return False

    # -- maintenance -----------------------------------------------------------------

    def evict(self) -> list[str]:
        """Remove least recently used entries until the store fits in ``max_bytes``.

        Entries whose lock is held are skipped; entries vanishing meanwhile are fine.
        Returns the keys removed, oldest first.
        """
        if not self._writable:
            return []
        self._sweep_tmp()
        infos = self._scan()
        total = sum(info.size for info in infos)
        evicted: list[str] = []
        for info in sorted(infos, key=lambda i: (i.last_used, i.key)):
            if total <= self.max_bytes:
                break
            if self._is_locked(info.key):
                continue
            if self._discard(info.path):
                evicted.append(info.key)
            total -= info.size  # removed by us or vanished: either way its bytes are gone
        return evicted

    def clear(self) -> int:
        """Remove every entry of ours; returns how many were removed."""
        if not self._writable:
            return 0
        removed = sum(1 for info in self._scan() if self._discard(info.path))
        self._sweep_tmp()
        return removed

    def stats(self) -> StoreStats:
        """Number of entries and their total size in bytes."""
        if not self._readable:
            return StoreStats(entries=0, total_bytes=0)
        infos = self._scan()
        return StoreStats(entries=len(infos), total_bytes=sum(i.size for i in infos))

    def _scan(self) -> list[_EntryInfo]:
        try:
            listing = os.scandir(self._entries)
        except OSError:
            return []
        infos: list[_EntryInfo] = []
        with listing:
            for item in listing:
                if _KEY_RE.fullmatch(item.name) is None:
                    continue
                info = self._entry_info(Path(item.path), item.name)
                if info is not None:
                    infos.append(info)
        return infos

    @staticmethod
    def _entry_info(path: Path, key: str) -> _EntryInfo | None:
        """Size and recency of an entry of ours; None if it vanished or is not ours."""
        try:
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                return None
            with os.scandir(path) as files:
                size = sum(f.stat(follow_symlinks=False).st_size for f in files)
        except OSError:
            return None
        return _EntryInfo(key, path, size, _read_last_used(path / META_NAME))

    def _sweep_tmp(self) -> None:
        """Remove staging leftovers of crashed processes (never fresh ones: they may be live)."""
        cutoff = time.time() - _STALE_TMP_SECONDS
        try:
            listing = os.scandir(self._tmp)
        except OSError:
            return
        with listing:
            for item in listing:
                try:
                    st = item.stat(follow_symlinks=False)
                except OSError:
                    continue
                if st.st_uid == os.getuid() and st.st_mtime < cutoff:
                    _remove_path(Path(item.path))

    def _discard(self, path: Path, ino: int | None = None) -> bool:
        """Unpublish an entry in one rename, then delete it; False if it was already gone."""
        grave = self._tmp / f"{path.name}.{secrets.token_hex(4)}.old"
        try:
            if ino is not None and not _same_inode(path, ino):
                return False
            os.rename(path, grave)
        except OSError:
            return False
        _remove_path(grave)
        return True

    # -- warnings --------------------------------------------------------------------

    def _warn_entry(self, key: str, reason: str, action: str) -> None:
        if (key, reason) in self._warned:
            return
        self._warned.add((key, reason))
        self._warn(f"pytest-aoti cache entry {key} not used: {reason}; {action}")

    def report(self, message: str) -> None:
        """Report a cache problem that was repaired or worked around; never raises."""
        self._warn(message)

    def _warn(self, message: str) -> None:
        if self._on_problem is not None:
            # the session lists it in the terminal summary: a warning would fail the test
            # under filterwarnings = error, for a problem that was already repaired
            self._on_problem(message)
            return
        warn_at_caller(AotiCacheWarning(message))


def _read_last_used(meta_path: Path) -> float:
    """``last_used`` of an entry for eviction order; unreadable metadata sorts first."""
    try:
        fd = os.open(meta_path, _READ_FLAGS)
        with os.fdopen(fd, "rb") as f:
            meta = json.loads(f.read(_META_LIMIT))
    except (OSError, ValueError):
        return 0.0
    value = meta.get("last_used") if isinstance(meta, dict) else None
    return float(value) if isinstance(value, (int, float)) and _is_number(value) else 0.0
