"""Tests of the package store: publishing, verification, trust checks, locking, eviction."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import shutil
import stat
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_aoti.cache import store as store_mod
from pytest_aoti.cache import store_files
from pytest_aoti.cache.store import FORMAT_VERSION, ArtifactStore, CacheEntry, StoreStats
from pytest_aoti.errors import AotiCacheWarning

REPO_ROOT = Path(__file__).resolve().parents[2]
KEY = "3f" * 32
OTHER_KEY = "c0ffee"
FOREIGN_UID = 1234

needs_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="os.chown to another uid needs root"
)


def make_package(directory: Path, size: int = 4096, seed: int = 0) -> Path:
    """A fake package: random bytes."""
    path = directory / f"src-{seed}-{size}.pt2"
    path.write_bytes(random.Random(seed).randbytes(size))
    return path


def entry_dir(root: Path, key: str) -> Path:
    return root / f"v{FORMAT_VERSION}" / "entries" / key


def tmp_dir(root: Path) -> Path:
    return root / f"v{FORMAT_VERSION}" / "tmp"


def snapshot(root: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every path under ``root`` with its mode, mtime and content."""
    result = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        content = path.read_bytes() if path.is_file() else b""
        result[str(path.relative_to(root))] = (st.st_mode, st.st_mtime_ns, content)
    return result


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def packages(tmp_path: Path) -> Path:
    directory = tmp_path / "src"
    directory.mkdir()
    return directory


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """A settable clock for ``created``/``last_used``."""
    now = [1_000_000.0]
    monkeypatch.setattr(store_mod, "_now", lambda: now[0])
    yield now


def stored(
    root: Path, packages: Path, key: str = KEY, size: int = 4096, seed: int = 0
) -> CacheEntry:
    entry = ArtifactStore(root).store(key, make_package(packages, size, seed), {"seed": seed})
    assert entry is not None
    return entry


# -- round trip and atomic publishing ----------------------------------------------------


def assert_inert(store: ArtifactStore, root: Path, packages: Path) -> None:
    """A store that is off: every call answers "nothing" and nothing reaches the disk."""
    assert not store.readable and not store.writable
    assert store.store(KEY, make_package(packages), {}) is None
    assert store.lookup(KEY) is None
    with store.locked(KEY):
        pass
    assert store.evict() == [] and store.clear() == 0
    assert store.stats() == StoreStats(entries=0, total_bytes=0)
    assert not root.exists()


def test_round_trip(root: Path, packages: Path) -> None:
    source = make_package(packages)
    caller = {"torch": "2.8.0", "parts": {"graph": "abc", "inputs": [1, 2]}, "none": None}
    store = ArtifactStore(root)
    assert store.readable and store.writable

    stored_entry = store.store(KEY, source, caller)
    entry = store.lookup(KEY)

    assert stored_entry is not None and entry is not None
    assert entry.key == KEY
    assert entry.package_path == entry_dir(root, KEY) / "package.pt2"
    assert entry.package_path.read_bytes() == source.read_bytes()
    meta = entry.metadata
    assert meta["caller"] == caller
    assert meta["format_version"] == FORMAT_VERSION
    assert meta["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
    assert meta["size"] == 4096
    assert meta["created"] <= meta["last_used"] <= time.time()
    assert stored_entry.metadata == meta
    assert ArtifactStore(root).lookup(OTHER_KEY) is None


def test_store_and_entries_are_private(root: Path, packages: Path) -> None:
    entry = stored(root, packages)
    for directory in (root, root / "v1", entry_dir(root, KEY), tmp_dir(root)):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    for file in entry_dir(root, KEY).iterdir():
        assert stat.S_IMODE(file.stat().st_mode) == 0o600, file
    assert entry.package_path.parent == entry_dir(root, KEY)


def test_missing_parents_are_created_private(tmp_path: Path, packages: Path) -> None:
    root = tmp_path / "a" / "b" / "cache"
    ArtifactStore(root).store(KEY, make_package(packages), {})
    for directory in (tmp_path / "a", tmp_path / "a" / "b", root):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory


def test_publish_leaves_only_the_entry(root: Path, packages: Path) -> None:
    stored(root, packages)
    assert sorted(p.name for p in entry_dir(root, KEY).iterdir()) == ["meta.json", "package.pt2"]
    assert list(tmp_dir(root).iterdir()) == []


def test_store_replaces_an_existing_entry(root: Path, packages: Path) -> None:
    stored(root, packages, seed=1)
    new = make_package(packages, seed=2)
    store = ArtifactStore(root)
    store.store(KEY, new, {"seed": 2})
    entry = store.lookup(KEY)
    assert entry is not None
    assert entry.package_path.read_bytes() == new.read_bytes()
    assert entry.metadata["caller"] == {"seed": 2}
    assert list(tmp_dir(root).iterdir()) == []


def _failing_copy(src: str, dst: str, **kwargs: Any) -> str:
    Path(dst).write_bytes(Path(src).read_bytes()[:100])
    raise OSError(errno.ENOSPC, "No space left on device")


def _refused_link(src: Any, dst: Any, **kwargs: Any) -> None:
    raise OSError(errno.EXDEV, "Invalid cross-device link")


def _failing_rename(src: Any, dst: Any) -> None:
    raise OSError(errno.EIO, "Input/output error")


@pytest.mark.parametrize(
    ("target", "replacement", "reason"),
    [
        (shutil, ("copyfile", _failing_copy), "No space left"),
        (os, ("rename", _failing_rename), "Input/output error"),
    ],
    ids=["copy", "publish"],
)
def test_failure_half_way_leaves_nothing(
    root: Path,
    packages: Path,
    monkeypatch: pytest.MonkeyPatch,
    target: object,
    replacement: tuple[str, Any],
    reason: str,
) -> None:
    store = ArtifactStore(root)
    monkeypatch.setattr(target, *replacement)
    monkeypatch.setattr(os, "link", _refused_link)  # the copy runs where links are refused

    with pytest.warns(AotiCacheWarning, match=f"could not store {KEY}.*{reason}") as record:
        assert store.store(KEY, make_package(packages), {}) is None

    assert len(record) == 1
    monkeypatch.undo()
    assert not entry_dir(root, KEY).exists()
    assert list(tmp_dir(root).iterdir()) == []
    assert store.lookup(KEY) is None


def test_unserializable_metadata_is_a_caller_bug(root: Path, packages: Path) -> None:
    with pytest.raises(TypeError):
        ArtifactStore(root).store(KEY, make_package(packages), {"x": object()})
    assert not entry_dir(root, KEY).exists()


# -- written once, read once ---------------------------------------------------------------


def _unread(f: Any) -> tuple[str, int]:
    raise AssertionError("the package was read again")


def test_a_stored_package_is_a_link_read_again_by_no_lookup(
    root: Path, packages: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = make_package(packages)
    entry = ArtifactStore(root).store(KEY, source, {})
    assert entry is not None
    assert entry.package_path.stat().st_ino == source.stat().st_ino  # no copy written

    monkeypatch.setattr(store_files, "hash_stream", _unread)
    found = ArtifactStore(root).lookup(KEY)
    assert found is not None and found.package_path.read_bytes() == source.read_bytes()


def test_a_package_written_after_its_hash_is_read_again(root: Path, packages: Path) -> None:
    entry = stored(root, packages)
    data = bytearray(entry.package_path.read_bytes())
    data[7] ^= 0x01
    with entry.package_path.open("r+b") as f:  # in place, at once: the same inode and size
        f.write(bytes(data))

    with pytest.warns(AotiCacheWarning, match=f"{KEY}.*checksum mismatch"):
        assert ArtifactStore(root).lookup(KEY) is None


def test_a_package_is_copied_where_links_are_refused(
    root: Path, packages: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "link", _refused_link)
    source = make_package(packages)
    entry = ArtifactStore(root).store(KEY, source, {})
    assert entry is not None
    assert entry.package_path.stat().st_ino != source.stat().st_ino
    assert ArtifactStore(root).lookup(KEY) is not None


# -- verification on lookup ----------------------------------------------------------------


def test_truncated_package_is_discarded(root: Path, packages: Path) -> None:
    damaged = stored(root, packages, KEY, seed=1)
    intact = stored(root, packages, OTHER_KEY, seed=2)
    data = damaged.package_path.read_bytes()
    damaged.package_path.write_bytes(data[:120])
    store = ArtifactStore(root)

    with pytest.warns(AotiCacheWarning, match=f"{KEY}.*truncated: 120 of 4096 bytes") as record:
        assert store.lookup(KEY) is None

    assert len(record) == 1
    assert not entry_dir(root, KEY).exists()
    assert store.lookup(KEY) is None  # quietly: gone now
    other = store.lookup(OTHER_KEY)
    assert other is not None and other.package_path == intact.package_path


def test_flipped_byte_is_a_checksum_mismatch(root: Path, packages: Path) -> None:
    entry = stored(root, packages)
    data = bytearray(entry.package_path.read_bytes())
    data[2000] ^= 0x01
    entry.package_path.write_bytes(bytes(data))

    with pytest.warns(AotiCacheWarning, match=f"{KEY}.*checksum mismatch") as record:
        assert ArtifactStore(root).lookup(KEY) is None

    assert len(record) == 1
    assert not entry_dir(root, KEY).exists()


def test_grown_package_is_a_size_mismatch(root: Path, packages: Path) -> None:
    entry = stored(root, packages)
    with entry.package_path.open("ab") as f:
        f.write(b"x")
    with pytest.warns(AotiCacheWarning, match="size mismatch: 4097 bytes, expected 4096"):
        assert ArtifactStore(root).lookup(KEY) is None


def _meta_without_sha(meta: dict[str, Any]) -> bytes:
    del meta["sha256"]
    return json.dumps(meta).encode()


@pytest.mark.parametrize(
    "rewrite",
    [
        lambda meta: b'{"format_version": 1, "sha',
        lambda meta: b"",
        lambda meta: b"[1, 2]",
        _meta_without_sha,
        lambda meta: json.dumps({**meta, "key": "someone-else"}).encode(),
    ],
    ids=["torn", "empty", "not-an-object", "no-sha256", "wrong-key"],
)
def test_corrupt_meta_is_discarded(root: Path, packages: Path, rewrite: Any) -> None:
    stored(root, packages)
    meta_path = entry_dir(root, KEY) / "meta.json"
    meta_path.write_bytes(rewrite(json.loads(meta_path.read_bytes())))

    with pytest.warns(AotiCacheWarning, match=f"{KEY}.*corrupt meta.json") as record:
        assert ArtifactStore(root).lookup(KEY) is None

    assert len(record) == 1
    assert not entry_dir(root, KEY).exists()


def test_missing_package_is_discarded(root: Path, packages: Path) -> None:
    stored(root, packages).package_path.unlink()
    with pytest.warns(AotiCacheWarning, match="package.pt2 missing"):
        assert ArtifactStore(root).lookup(KEY) is None
    assert not entry_dir(root, KEY).exists()


def test_older_format_version_is_replaced_quietly(root: Path, packages: Path) -> None:
    stored(root, packages, seed=1)
    meta_path = entry_dir(root, KEY) / "meta.json"
    meta = json.loads(meta_path.read_bytes())
    meta_path.write_text(json.dumps({**meta, "format_version": FORMAT_VERSION - 1}))
    store = ArtifactStore(root)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert store.lookup(KEY) is None

    assert not entry_dir(root, KEY).exists()
    source = make_package(packages, seed=2)
    store.store(KEY, source, {})
    entry = store.lookup(KEY)
    assert entry is not None and entry.package_path.read_bytes() == source.read_bytes()


def test_symlinked_package_is_refused(root: Path, packages: Path) -> None:
    entry = stored(root, packages)
    elsewhere = make_package(packages, seed=9)
    entry.package_path.unlink()
    entry.package_path.symlink_to(elsewhere)
    with pytest.warns(AotiCacheWarning, match="package.pt2 is a symbolic link"):
        assert ArtifactStore(root).lookup(KEY) is None
    assert elsewhere.exists()


def test_lookup_refreshes_last_used(root: Path, packages: Path, clock: list[float]) -> None:
    stored(root, packages)
    clock[0] += 3600
    entry = ArtifactStore(root).lookup(KEY)
    assert entry is not None
    assert entry.metadata["last_used"] == clock[0]
    assert entry.metadata["created"] == clock[0] - 3600
    on_disk = json.loads((entry_dir(root, KEY) / "meta.json").read_bytes())
    assert on_disk == entry.metadata
    assert list(tmp_dir(root).iterdir()) == []


def test_failed_refresh_does_not_fail_the_lookup(
    root: Path, packages: Path, clock: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    stored(root, packages)
    store = ArtifactStore(root)
    clock[0] += 3600
    monkeypatch.setattr(os, "replace", _failing_rename)
    entry = store.lookup(KEY)
    assert entry is not None
    monkeypatch.undo()
    assert list(tmp_dir(root).iterdir()) == []


# -- trust: ownership and permissions -------------------------------------------------------


@needs_root
def test_entry_owned_by_someone_else_is_refused_and_kept(root: Path, packages: Path) -> None:
    entry = stored(root, packages)
    os.chown(entry_dir(root, KEY), FOREIGN_UID, FOREIGN_UID)
    store = ArtifactStore(root)

    with pytest.warns(
        AotiCacheWarning, match=f"{KEY}.*owned by uid {FOREIGN_UID}, not you"
    ) as record:
        assert store.lookup(KEY) is None
        assert store.lookup(KEY) is None  # warned once per entry

    assert len(record) == 1
    assert entry.package_path.exists()
    with pytest.warns(AotiCacheWarning, match=f"could not store {KEY}.*owned by uid {FOREIGN_UID}"):
        assert store.store(KEY, make_package(packages, seed=5), {}) is None
    assert store.clear() == 0
    assert entry.package_path.exists()


@needs_root
def test_package_owned_by_someone_else_is_refused_and_kept(root: Path, packages: Path) -> None:
    entry = stored(root, packages)
    os.chown(entry.package_path, FOREIGN_UID, FOREIGN_UID)
    with pytest.warns(AotiCacheWarning, match=f"package.pt2 is owned by uid {FOREIGN_UID}"):
        assert ArtifactStore(root).lookup(KEY) is None
    assert entry.package_path.exists()


def test_group_writable_entry_is_refused_and_kept(root: Path, packages: Path) -> None:
    entry = stored(root, packages)
    entry.package_path.chmod(0o620)
    with pytest.warns(AotiCacheWarning, match="writable by group or others"):
        assert ArtifactStore(root).lookup(KEY) is None
    assert entry.package_path.exists()


def test_root_owned_by_someone_else_is_refused(
    root: Path, packages: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root.mkdir(mode=0o700)
    monkeypatch.setattr(os, "getuid", lambda: FOREIGN_UID)

    with pytest.warns(AotiCacheWarning, match="refused.*owned by uid") as record:
        store = ArtifactStore(root)

    assert len(record) == 1
    assert not store.readable and not store.writable
    assert store.store(KEY, make_package(packages), {}) is None
    assert store.lookup(KEY) is None
    assert list(root.iterdir()) == []


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777])
@pytest.mark.parametrize("cache_mode", ["read", "readwrite"])
def test_group_or_world_writable_root_is_refused(
    root: Path, packages: Path, mode: int, cache_mode: Any
) -> None:
    root.mkdir()
    root.chmod(mode)

    with pytest.warns(AotiCacheWarning, match=r"refused.*writable by group or others") as record:
        store = ArtifactStore(root, mode=cache_mode)

    assert len(record) == 1
    assert not store.readable and not store.writable
    assert store.store(KEY, make_package(packages), {}) is None
    assert list(root.iterdir()) == []


def test_existing_entries_of_an_unsafe_root_are_not_served(root: Path, packages: Path) -> None:
    stored(root, packages)
    root.chmod(0o777)
    with pytest.warns(AotiCacheWarning, match="refused"):
        store = ArtifactStore(root)
    assert store.lookup(KEY) is None
    assert entry_dir(root, KEY).exists()


# -- unusable directories ----------------------------------------------------------------


def test_uncreatable_root_turns_the_cache_off(
    root: Path, packages: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def deny(path: Any, mode: int = 0o777) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(os, "mkdir", deny)
    with pytest.warns(AotiCacheWarning, match="off for this run.*Permission denied") as record:
        store = ArtifactStore(root)

    assert len(record) == 1
    assert_inert(store, root, packages)


def test_unwritable_parent_directory(tmp_path: Path, packages: Path) -> None:
    parent = tmp_path / "readonly"
    parent.mkdir()
    parent.chmod(0o500)
    try:
        try:
            (parent / "probe").mkdir()
        except PermissionError:
            pass
        else:
            pytest.skip("this user writes through 0o500 directories (root); covered by mocks")
        with pytest.warns(AotiCacheWarning, match="off for this run") as record:
            store = ArtifactStore(parent / "cache")
        assert len(record) == 1
        assert store.store(KEY, make_package(packages), {}) is None
        assert store.lookup(KEY) is None
    finally:
        parent.chmod(0o700)


def test_unwritable_existing_store_is_read_only(
    root: Path, packages: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored(root, packages)
    real_open = os.open

    def read_only_fs(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_CREAT and str(path).startswith(str(root)):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only_fs)
    with pytest.warns(
        AotiCacheWarning, match="read-only for this run.*Read-only file system"
    ) as record:
        store = ArtifactStore(root)

    assert len(record) == 1
    assert store.readable and not store.writable
    assert store.lookup(KEY) is not None
    assert store.store(OTHER_KEY, make_package(packages, seed=3), {}) is None
    assert not entry_dir(root, OTHER_KEY).exists()


# -- modes -------------------------------------------------------------------------------


def test_mode_off_creates_nothing(root: Path, packages: Path) -> None:
    store = ArtifactStore(root, mode="off")
    assert_inert(store, root, packages)


def test_mode_off_ignores_existing_entries(root: Path, packages: Path) -> None:
    stored(root, packages)
    assert ArtifactStore(root, mode="off").lookup(KEY) is None


def test_mode_read_never_writes(root: Path, packages: Path, clock: list[float]) -> None:
    stored(root, packages, KEY, seed=1)
    stored(root, packages, OTHER_KEY, seed=2)
    (entry_dir(root, OTHER_KEY) / "meta.json").write_text("{")
    before = snapshot(root)
    clock[0] += 3600
    store = ArtifactStore(root, mode="read", max_bytes=0)

    assert store.readable and not store.writable
    assert store.lookup(KEY) is not None
    with pytest.warns(
        AotiCacheWarning, match=f"{OTHER_KEY}.*corrupt meta.json.*not using it"
    ) as record:
        assert store.lookup(OTHER_KEY) is None
        assert store.lookup(OTHER_KEY) is None
    assert len(record) == 1
    assert store.store("new", make_package(packages, seed=3), {}) is None
    with store.locked(KEY):
        pass
    assert store.evict() == [] and store.clear() == 0
    assert store.stats().entries == 2

    assert snapshot(root) == before


def test_mode_read_on_a_missing_root_creates_nothing(root: Path) -> None:
    store = ArtifactStore(root, mode="read")
    assert store.lookup(KEY) is None
    assert not root.exists()


def test_bad_mode_is_rejected(root: Path) -> None:
    with pytest.raises(ValueError, match="cache mode"):
        ArtifactStore(root, mode="write")  # type: ignore[arg-type]


# -- keys --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key", ["../x", "", "..", ".", "a/b", "/abs", "A", "-x", "_x", "a.b", "a\x00", "a" * 129]
)
def test_invalid_keys_are_rejected(root: Path, packages: Path, key: str) -> None:
    store = ArtifactStore(root)
    source = make_package(packages)
    with pytest.raises(ValueError, match="invalid cache key"):
        store.lookup(key)
    with pytest.raises(ValueError, match="invalid cache key"):
        store.store(key, source, {})
    with pytest.raises(ValueError, match="invalid cache key"):
        store.locked(key)
    assert sorted(p.name for p in (root / "v1").iterdir()) == ["entries", "locks", "tmp"]
    assert list((root / "v1" / "entries").iterdir()) == []


def test_longest_key_is_accepted(root: Path, packages: Path) -> None:
    key = "a" * 128
    assert ArtifactStore(root).store(key, make_package(packages), {}) is not None


# -- eviction, clear, stats -----------------------------------------------------------------


def _store_three(root: Path, packages: Path, clock: list[float], max_bytes: int) -> ArtifactStore:
    store = ArtifactStore(root, max_bytes=max_bytes)
    for seed, key in enumerate(("a", "b", "c")):
        clock[0] += 100
        store.store(key, make_package(packages, 10_000, seed), {})
    return store


def test_evict_removes_least_recently_used(root: Path, packages: Path, clock: list[float]) -> None:
    store = _store_three(root, packages, clock, max_bytes=25_000)
    clock[0] += 100
    assert store.lookup("a") is not None  # now the most recently used

    assert store.evict() == ["b"]

    assert store.lookup("b") is None
    assert store.lookup("a") is not None and store.lookup("c") is not None
    assert store.stats().total_bytes <= 25_000


def test_evict_down_to_max_bytes(root: Path, packages: Path, clock: list[float]) -> None:
    store = _store_three(root, packages, clock, max_bytes=10_500)
    assert store.evict() == ["a", "b"]
    assert store.stats().entries == 1


def test_evict_keeps_everything_within_budget(
    root: Path, packages: Path, clock: list[float]
) -> None:
    store = _store_three(root, packages, clock, max_bytes=10**6)
    assert store.evict() == []
    assert store.stats().entries == 3


def test_evict_skips_locked_entries(root: Path, packages: Path, clock: list[float]) -> None:
    store = _store_three(root, packages, clock, max_bytes=25_000)
    with store.locked("a"):
        assert store.evict() == ["b"]
    assert store.lookup("a") is not None


def test_evict_sweeps_stale_temp_files(root: Path, packages: Path) -> None:
    store = ArtifactStore(root)
    stale, fresh = tmp_dir(root) / "x.stale.new", tmp_dir(root) / "y.fresh.new"
    stale.mkdir()
    fresh.mkdir()
    two_hours_ago = time.time() - 7200
    os.utime(stale, (two_hours_ago, two_hours_ago))
    store.evict()
    assert not stale.exists() and fresh.exists()


def test_clear(root: Path, packages: Path) -> None:
    for seed, key in enumerate(("a", "b", "c")):
        stored(root, packages, key, seed=seed)
    store = ArtifactStore(root)
    assert store.stats().entries == 3

    assert store.clear() == 3

    assert store.stats() == StoreStats(entries=0, total_bytes=0)
    assert all(store.lookup(key) is None for key in ("a", "b", "c"))
    assert store.clear() == 0


def test_stats(root: Path, packages: Path) -> None:
    stored(root, packages, "a", size=1000, seed=1)
    stored(root, packages, "b", size=3000, seed=2)
    meta_bytes = sum((entry_dir(root, k) / "meta.json").stat().st_size for k in ("a", "b"))
    assert ArtifactStore(root).stats() == StoreStats(entries=2, total_bytes=4000 + meta_bytes)


# -- locking ---------------------------------------------------------------------------------


def test_lock_timeout_warns_and_goes_on(root: Path) -> None:
    store, other = ArtifactStore(root), ArtifactStore(root)
    ran = False
    with store.locked(KEY):
        with pytest.warns(AotiCacheWarning, match=f"lock of {KEY}; going on without it"):
            with other.locked(KEY, timeout=0.05):
                ran = True
    assert ran
    assert (root / "v1" / "locks" / f"{KEY}.lock").exists()


def test_a_stuck_lock_holder_costs_a_problem_line_not_the_run(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pytest_aoti.cache.store_lock as store_module

    assert store_module.LOCK_TIMEOUT <= 120
    monkeypatch.setattr(store_module, "LOCK_TIMEOUT", 0.2)
    problems: list[str] = []
    holder, waiter = ArtifactStore(root), ArtifactStore(root, on_problem=problems.append)
    with holder.locked(KEY):
        started = time.monotonic()
        with waiter.locked(KEY):
            waited = time.monotonic() - started
    assert 0.2 <= waited < 5
    assert problems == [
        f"pytest-aoti waited 0.2 s for the cache lock of {KEY}; going on without it"
    ]


RACER = """
import sys, time, warnings
from pathlib import Path
warnings.simplefilter("error")
from pytest_aoti.cache.store import ArtifactStore

root, key, package, counter, ready, go = sys.argv[1:]
store = ArtifactStore(Path(root))
Path(ready).touch()
deadline = time.monotonic() + 30
while not Path(go).exists():
    if time.monotonic() > deadline:
        sys.exit("never told to go")
    time.sleep(0.005)
with store.locked(key):
    if store.lookup(key) is None:
        with open(counter, "a") as f:
            f.write("compile\\n")
        time.sleep(0.5)
        store.store(key, Path(package), {"by": ready})
entry = store.lookup(key)
assert entry is not None
print(entry.metadata["sha256"])
"""


def test_two_processes_compile_once(root: Path, packages: Path, tmp_path: Path) -> None:
    source = make_package(packages)
    counter, go = tmp_path / "counter", tmp_path / "go"
    readies = [tmp_path / f"ready{i}" for i in range(2)]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    racers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                RACER,
                str(root),
                KEY,
                str(source),
                str(counter),
                str(ready),
                str(go),
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for ready in readies
    ]
    try:
        deadline = time.monotonic() + 60
        while not all(r.exists() for r in readies) and time.monotonic() < deadline:
            time.sleep(0.01)
        go.touch()
        results = [racer.communicate(timeout=60) for racer in racers]
    finally:
        for racer in racers:
            racer.kill()

    for racer, (_out, err) in zip(racers, results):
        assert racer.returncode == 0, err
    assert counter.read_text() == "compile\n"
    expected = hashlib.sha256(source.read_bytes()).hexdigest()
    assert [out.strip() for out, _ in results] == [expected, expected]
    entry = ArtifactStore(root).lookup(KEY)
    assert entry is not None and entry.metadata["sha256"] == expected
