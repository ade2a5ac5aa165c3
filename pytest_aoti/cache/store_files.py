"""The store's safe-file helpers: hashing, atomic fsynced writes, removal, ownership and
permission checks, and ``meta.json``. Nothing here follows a symbolic link or trusts an unchecked
path."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

FORMAT_VERSION: int = 1

KEY_RE = re.compile(r"[0-9a-z][0-9a-z_-]{0,127}")
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
DIR_MODE = 0o700
FILE_MODE = 0o600
META_LIMIT = 1 << 20
_CHUNK = 1 << 20
# O_NONBLOCK keeps a FIFO planted in an entry from hanging the open.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class EntryMissing(Exception):
    """The entry does not exist (or vanished while being read)."""


class EntryStale(Exception):
    """The entry was written under another format version."""


class EntryDamaged(Exception):
    """The entry's files do not match its metadata; safe to discard."""


class PathRefused(Exception):
    """A path fails the ownership or permission checks; it is left in place."""


class StoreUnusable(Exception):
    """The store directories cannot be created or written."""


def validate_key(key: str) -> str:
    """``key`` if it is 1-128 of ``[0-9a-z_-]`` not starting with ``-``/``_``, else ValueError."""
    if not isinstance(key, str) or KEY_RE.fullmatch(key) is None:
        raise ValueError(
            f"invalid cache key {key!r}: expected 1-128 characters of [0-9a-z_-], "
            "starting with a letter or digit"
        )
    return key


def trust_problem(st: os.stat_result, *, directory: bool) -> str | None:
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


def hash_stream(f: BinaryIO) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    while chunk := f.read(_CHUNK):
        digest.update(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def link_or_copy(source: Path, target: Path) -> bool:
    """``target`` as a hard link to ``source`` (True), or a copy where the filesystem refuses
    one (False): either way later changes to ``source``'s directory entry cannot touch it."""
    try:
        os.link(source, target)
        return True
    except OSError:  # another filesystem, or one without links
        shutil.copyfile(source, target)
        return False


def sha256_of(path: Path) -> str:
    """sha256 of a file's content, as recorded in ``meta.json``."""
    with open(path, "rb") as f:
        return hash_stream(f)[0]


def hash_and_sync(path: Path) -> tuple[str, int]:
    """Hash the file as written, and flush it to disk before it can be published."""
    with open(path, "rb") as f:
        result = hash_stream(f)
        os.fsync(f.fileno())
    return result


def write_new_file(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # some filesystems cannot fsync directories
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def encode_meta(meta: Mapping[str, Any]) -> bytes:
    return json.dumps(meta, indent=1, sort_keys=True, allow_nan=False).encode()


def plain_json(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The caller's metadata as ``meta.json`` reads it back; TypeError/ValueError if not JSON."""
    return dict(json.loads(json.dumps(dict(metadata), allow_nan=False)))


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def meta_field_problem(meta: Mapping[str, Any], key: str) -> str | None:
    if meta.get("key") != key:
        return f"key is {meta.get('key')!r}"
    sha = meta.get("sha256")
    if not isinstance(sha, str) or _SHA256_RE.fullmatch(sha) is None:
        return "bad 'sha256'"
    size = meta.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return "bad 'size'"
    for name in ("created", "last_used"):
        if not is_number(meta.get(name)):
            return f"bad {name!r}"
    if not isinstance(meta.get("caller"), dict):
        return "bad 'caller'"
    return None


def parse_meta(raw: bytes, key: str) -> dict[str, Any]:
    if len(raw) > META_LIMIT:
        raise EntryDamaged("corrupt meta.json: larger than 1 MiB")
    try:
        meta = json.loads(raw)
    except ValueError as e:
        raise EntryDamaged(f"corrupt meta.json: {e}") from None
    if not isinstance(meta, dict):
        raise EntryDamaged("corrupt meta.json: not a JSON object")
    version = meta.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise EntryDamaged("corrupt meta.json: no format_version")
    if version != FORMAT_VERSION:
        raise EntryStale(version)
    problem = meta_field_problem(meta, key)
    if problem is not None:
        raise EntryDamaged(f"corrupt meta.json: {problem}")
    return meta


def file_stamp(st: os.stat_result) -> dict[str, int]:
    """What shows a file unchanged since it was hashed, as a build tool's cache records it:
    its inode, device, size and modification time (a link to it changes none of them)."""
    return {"ino": st.st_ino, "dev": st.st_dev, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def unchanged_since_hashed(st: os.stat_result, meta: Mapping[str, Any]) -> bool:
    """Whether the file of ``st`` is the one ``meta`` recorded hashing, unchanged since."""
    stamp = meta.get("stamp")
    return isinstance(stamp, dict) and stamp == file_stamp(st)


def check_package(f: BinaryIO, meta: Mapping[str, Any]) -> None:
    """Raise :class:`EntryDamaged` unless the open package has the size and checksum of
    ``meta``; the checksum is read again only if the file changed since it was hashed."""
    expected = meta["size"]
    st = os.fstat(f.fileno())
    actual = st.st_size
    if actual < expected:
        raise EntryDamaged(f"truncated: {actual} of {expected} bytes")
    if actual > expected:
        raise EntryDamaged(f"size mismatch: {actual} bytes, expected {expected}")
    if unchanged_since_hashed(st, meta):
        return
    digest, read = hash_stream(f)
    if read != expected or digest != meta["sha256"]:
        raise EntryDamaged("checksum mismatch")


def same_inode(path: Path, ino: int) -> bool:
    try:
        return os.lstat(path).st_ino == ino
    except OSError:
        return False


def read_last_used(meta_path: Path) -> float:
    """``last_used`` of an entry for eviction order; unreadable metadata sorts first."""
    try:
        fd = os.open(meta_path, READ_FLAGS)
        with os.fdopen(fd, "rb") as f:
            meta = json.loads(f.read(META_LIMIT))
    except (OSError, ValueError):
        return 0.0
    value = meta.get("last_used") if isinstance(meta, dict) else None
    return float(value) if isinstance(value, (int, float)) and is_number(value) else 0.0


def make_private_dir(path: Path) -> None:
    """Create a store directory with mode 0o700; one that exists is left to the caller's check."""
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        return  # existing, or made by a concurrent process; checked by the caller
    except OSError as e:
        raise StoreUnusable(f"cannot create {path}: {e.strerror or e}") from None
    # A restrictive umask may have dropped the owner's bits.
    with contextlib.suppress(OSError):
        os.chmod(path, DIR_MODE)


def check_dir(path: Path, *, follow: bool) -> None:
    """Refuse a store directory that is not ours alone (``follow``: the root may be a link)."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError as e:
        raise StoreUnusable(f"cannot inspect {path}: {e.strerror or e}") from None
    problem = trust_problem(st, directory=True)
    if problem is not None:
        raise PathRefused(f"{path} is {problem}")


def entry_dir_inode(entry_dir: Path) -> int:
    """The inode of a trusted entry directory, to notice it being replaced while read."""
    try:
        st = os.lstat(entry_dir)
    except FileNotFoundError:
        raise EntryMissing from None
    except OSError as e:
        raise PathRefused(f"entry directory is unreadable: {e.strerror or e}") from None
    problem = trust_problem(st, directory=True)
    if problem is not None:
        raise PathRefused(f"entry directory is {problem}")
    return st.st_ino


def open_entry_file(entry_dir: Path, name: str, dir_ino: int) -> BinaryIO | None:
    """Open a file of a trusted entry dir; None if it is missing from that dir."""
    try:
        fd = os.open(entry_dir / name, READ_FLAGS)
    except FileNotFoundError:
        if same_inode(entry_dir, dir_ino):
            return None
        raise EntryMissing from None  # the entry was removed or replaced concurrently
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PathRefused(f"{name} is a symbolic link") from None
        raise PathRefused(f"{name} is unreadable: {e.strerror or e}") from None
    f = os.fdopen(fd, "rb")
    problem = trust_problem(os.fstat(fd), directory=False)
    if problem is not None:
        f.close()
        raise PathRefused(f"{name} is {problem}")
    return f
