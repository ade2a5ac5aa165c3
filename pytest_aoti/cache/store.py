"""A store of compiled ``.pt2`` packages by content key, shared safely between processes and runs
(POSIX only). A package is native code: nothing is handed out unverified, no path the store does
not own is followed. Under ``root`` (0o700, the user's; other ``vN`` left alone), ``v1/`` holds
``entries/<key>/package.pt2`` (0o600) and ``meta.json`` (format_version, key, sha256, size,
created, last_used, caller), ``locks/<key>.lock`` (kept, empty) and ``tmp/`` (staging; leftovers
older than an hour are swept). An entry is staged under ``tmp/`` (fsynced) and published by
renaming it to ``entries/<key>``, so readers see a whole entry or none."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pytest_aoti.cache.store_files import (
    FILE_MODE,
    FORMAT_VERSION,
    KEY_RE,
    META_LIMIT,
    EntryDamaged,
    EntryMissing,
    EntryStale,
    PathRefused,
    StoreUnusable,
    check_dir,
    check_package,
    encode_meta,
    entry_dir_inode,
    file_stamp,
    fsync_dir,
    hash_and_sync,
    link_or_copy,
    make_private_dir,
    open_entry_file,
    parse_meta,
    plain_json,
    read_last_used,
    remove_path,
    same_inode,
    trust_problem,
    validate_key,
    write_new_file,
)
from pytest_aoti.cache.store_lock import KeyLocks
from pytest_aoti.errors import AotiCacheWarning

__all__ = [
    "FORMAT_VERSION",
    "ArtifactStore",
    "CacheEntry",
    "CacheMode",
    "StoreStats",
    "validate_key",
]

CacheMode = Literal["off", "read", "readwrite"]

PACKAGE_NAME = "package.pt2"
META_NAME = "meta.json"

_SIDECAR_RE = re.compile(r"[a-z][a-z0-9_]{0,31}")
_STALE_TMP_SECONDS = 3600.0
# Rewriting meta.json on every hit of a hot entry buys no useful recency information.
_TOUCH_INTERVAL = 60.0
_EXISTS_ERRNOS = frozenset({errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR})


def _now() -> float:  # the clock for created/last_used; tests replace it
    return time.time()


_STAMP_BACKDATE_NS = 10**9
"""How far before its hash a stored package's modification time is set: any later write
sets a time no stamp holds."""


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


class ArtifactStore:
    """Compiled packages by content key in a private directory. A cache failure never fails a test:
    it is reported (to ``on_problem``, else as an :class:`AotiCacheWarning`) and is a miss; an
    unusable or untrusted ``root`` turns the store off or read-only."""

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
        self._key_locks = KeyLocks(self._locks, self.report)
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

    def _open(self) -> tuple[bool, bool]:
        if self.mode == "off":
            return False, False
        if self.mode == "read":
            # Read mode creates nothing: a missing root is simply an empty cache.
            problem = self._existing_dirs_problem()
            if problem is not None:
                self.report(f"pytest-aoti cache refused, off for this run: {problem}")
                return False, False
            return True, False
        try:
            self._make_dirs()
            self._probe_write()
        except PathRefused as e:
            self.report(f"pytest-aoti cache refused, off for this run: {e}")
            return False, False
        except StoreUnusable as e:
            if self._entries_readable():
                self.report(f"pytest-aoti cache {self.root} is read-only for this run: {e}")
                return True, False
            self.report(f"pytest-aoti cache {self.root} is off for this run: {e}")
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
            problem = trust_problem(st, directory=True)
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
            make_private_dir(path)
        check_dir(self.root, follow=True)
        for path in self._store_dirs():
            make_private_dir(path)
            check_dir(path, follow=False)

    def _probe_write(self) -> None:
        try:
            fd, name = tempfile.mkstemp(prefix=".probe-", dir=self._tmp)
            os.close(fd)
            os.unlink(name)
        except OSError as e:
            raise StoreUnusable(f"cannot write in {self._tmp}: {e.strerror or e}") from None

    def _entries_readable(self) -> bool:
        if self._existing_dirs_problem() is not None:
            return False
        return self._entries.is_dir() and os.access(self._entries, os.R_OK | os.X_OK)

    def lookup(self, key: str) -> CacheEntry | None:
        """The verified entry for ``key`` (metadata, size, sha256, ownership), or None on a miss.
        A damaged entry is discarded (when writable), an untrusted one left in place, each with
        one warning. A hit refreshes ``last_used``."""
        validate_key(key)
        if not self._readable:
            return None
        entry_dir = self._entries / key
        try:
            meta = self._verify(key, entry_dir, ino := entry_dir_inode(entry_dir))
        except EntryMissing:
            return None
        except EntryStale:
            if self._writable:
                self._discard(entry_dir, ino)
            return None
        except PathRefused as e:
            self._warn_entry(key, str(e), "left it in place")
            return None
        except EntryDamaged as e:
            removed = self._writable and self._discard(entry_dir, ino)
            self._warn_entry(key, str(e), "removed it" if removed else "not using it")
            return None
        meta = self._touch(key, entry_dir, meta, ino)
        return CacheEntry(key=key, package_path=entry_dir / PACKAGE_NAME, metadata=meta)

    def _verify(self, key: str, entry_dir: Path, ino: int) -> dict[str, Any]:
        with contextlib.ExitStack() as stack:
            meta_file = open_entry_file(entry_dir, META_NAME, ino)
            if meta_file is None:
                raise EntryDamaged(f"{META_NAME} missing")
            stack.enter_context(meta_file)
            # ownership-check the package first: a damaged entry is discarded only if all ours
            package = open_entry_file(entry_dir, PACKAGE_NAME, ino)
            if package is not None:
                stack.enter_context(package)
            meta = parse_meta(meta_file.read(META_LIMIT + 1), key)
            if package is None:
                raise EntryDamaged(f"{PACKAGE_NAME} missing")
            check_package(package, meta)
        return meta

    def _touch(self, key: str, entry_dir: Path, meta: dict[str, Any], ino: int) -> dict[str, Any]:
        """Record a hit in ``last_used``; recency is advisory, so failures are ignored."""
        now = _now()
        if not self._writable or now - meta["last_used"] < _TOUCH_INTERVAL:
            return meta
        updated = {**meta, "last_used": now}
        try:
            self._replace_in_entry(key, entry_dir, ino, META_NAME, encode_meta(updated))
        except OSError:
            return meta
        return updated

    def _replace_in_entry(
        self, key: str, entry_dir: Path, ino: int, name: str, data: bytes
    ) -> None:
        """Write ``data`` as the entry's file ``name`` in one rename, staged under ``tmp/``;
        :class:`FileNotFoundError` where the entry was replaced or removed since ``ino``."""
        suffix = "." + name.removesuffix(".json")
        fd, temp = tempfile.mkstemp(prefix=f"{key}.", suffix=suffix, dir=self._tmp)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            # Never write over an entry published since it was verified.
            if not same_inode(entry_dir, ino):
                raise FileNotFoundError(entry_dir)
            os.replace(temp, entry_dir / name)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise

    def store(self, key: str, package_file: Path, metadata: Mapping[str, Any]) -> CacheEntry | None:
        """Copy ``package_file`` in under ``key`` (``metadata`` kept under ``caller``); the new
        entry, or None when not writable or (with one warning) when storing fails."""
        validate_key(key)
        caller = plain_json(metadata)
        if not self._writable:
            return None
        try:
            return self._publish(key, Path(package_file), caller)
        except (OSError, PathRefused) as e:
            self.report(f"pytest-aoti could not store {key} in the cache: {e}")
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
        link_or_copy(package_file, package)  # written once: by the compile
        os.chmod(package, FILE_MODE)  # copyfile creates it under the umask
        digest, size = hash_and_sync(package)
        # a write after the hash, even in the same clock tick, moves the time off this one
        hashed = os.stat(package)
        os.utime(package, ns=(hashed.st_atime_ns, time.time_ns() - _STAMP_BACKDATE_NS))
        now = _now()
        meta: dict[str, Any] = {
            "format_version": FORMAT_VERSION,
            "key": key,
            "sha256": digest,
            "size": size,
            # a lookup that finds the file as hashed reads it no second time
            "stamp": file_stamp(os.stat(package)),
            "created": now,
            "last_used": now,
            "caller": caller,
        }
        write_new_file(staging / META_NAME, encode_meta(meta))
        fsync_dir(staging)
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
        fsync_dir(self._entries)
        return True

    def _clear_target(self, target: Path) -> None:
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            return
        if st.st_uid != os.getuid():
            raise PathRefused(f"the existing entry is owned by uid {st.st_uid}, not you")
        self._discard(target)

    def read_sidecar(self, key: str, name: str) -> dict[str, Any] | None:
        """``<name>.json`` beside ``key``'s package (not checksummed); None if missing/unusable."""
        validate_key(key)
        if not self._readable or not _SIDECAR_RE.fullmatch(name):
            return None
        entry_dir = self._entries / key
        try:
            ino = entry_dir_inode(entry_dir)
            file = open_entry_file(entry_dir, f"{name}.json", ino)
            if file is None:
                return None
            with file:
                data = json.loads(file.read(META_LIMIT + 1))
        except (EntryMissing, PathRefused, OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def write_sidecar(self, key: str, name: str, data: Mapping[str, Any]) -> bool:
        """Write ``<name>.json`` into ``key``'s entry atomically; False if not writable or gone."""
        validate_key(key)
        if not _SIDECAR_RE.fullmatch(name) or name == "meta":
            raise ValueError(f"bad sidecar name {name!r}")
        if not self._writable:
            return False
        entry_dir = self._entries / key
        try:
            ino = entry_dir_inode(entry_dir)
            encoded = json.dumps(plain_json(data), sort_keys=True).encode()
            self._replace_in_entry(key, entry_dir, ino, f"{name}.json", encoded)
        except (EntryMissing, PathRefused, OSError):
            return False
        return True

    def locked(
        self, key: str, timeout: float | None = None
    ) -> contextlib.AbstractContextManager[None]:
        """Hold ``key``'s lock; past ``timeout``, warn and go on (at worst compiling twice)."""
        validate_key(key)
        if not self._writable:
            return contextlib.nullcontext()
        return self._key_locks.held(key, timeout)

    def evict(self) -> list[str]:
        """Evict least recently used unlocked entries to fit ``max_bytes``; their keys, oldest 1st."""
        if not self._writable:
            return []
        self._sweep_tmp()
        infos = self._scan()
        total = sum(info.size for info in infos)
        evicted: list[str] = []
        for info in sorted(infos, key=lambda i: (i.last_used, i.key)):
            if total <= self.max_bytes:
                break
            if self._key_locks.is_locked(info.key):
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
                if KEY_RE.fullmatch(item.name) is None:
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
        return _EntryInfo(key, path, size, read_last_used(path / META_NAME))

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
                    remove_path(Path(item.path))

    def _discard(self, path: Path, ino: int | None = None) -> bool:
        """Unpublish an entry in one rename, then delete it; False if it was already gone."""
        grave = self._tmp / f"{path.name}.{secrets.token_hex(4)}.old"
        try:
            if ino is not None and not same_inode(path, ino):
                return False
            os.rename(path, grave)
        except OSError:
            return False
        remove_path(grave)
        return True

    def _warn_entry(self, key: str, reason: str, action: str) -> None:
        if (key, reason) in self._warned:
            return
        self._warned.add((key, reason))
        self.report(f"pytest-aoti cache entry {key} not used: {reason}; {action}")

    def report(self, message: str) -> None:
        """Report a cache problem that was repaired or worked around; never raises."""
        if self._on_problem is not None:
            # listed in the summary: a warning would fail the test under filterwarnings = error
            self._on_problem(message)
            return
        AotiCacheWarning(message).issue()
