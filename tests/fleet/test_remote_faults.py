"""The fleet store survives its writers, without a compile: a fault-injecting fsspec
filesystem that raises or sleeps at each call site in turn, hostile entries (junk
signatures, deep nesting, folders, FIFOs, huge files, replayed and revoked entries), repair
by a trusted publisher, and keys that are never printed."""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fsspec")
# imported here, by the outer session: pytester drops modules first imported by an inner
# run, and cryptography's bindings break when imported a second time
pytest.importorskip("cryptography.hazmat.primitives.serialization")
pytest.importorskip("cryptography.hazmat.primitives.asymmetric.ed25519")

from fsspec.implementations.local import LocalFileSystem  # noqa: E402

from pytest_aoti.errors import AotiUsageError  # noqa: E402
from pytest_aoti.fleet.manifest import MANIFEST_LIMIT  # noqa: E402
from pytest_aoti.fleet.open import credential_options, open_remote  # noqa: E402
from pytest_aoti.fleet.redact import redact  # noqa: E402
from pytest_aoti.fleet.signing import (  # noqa: E402
    SIGNING_KEY_ENV,
    TRUSTED_KEYS_ENV,
    canonical_bytes,
    generate_key_pair,
    load_trust,
)
from pytest_aoti.fleet.store import Deadlines, RemoteStore  # noqa: E402

KEY = "0123456789abcdef0123456789abcdef01234567"
CALLER = {"signature": {"mutated_inputs": ["x"]}, "compile_seconds": 6.5}
SHORT = Deadlines(call=0.5, transfer=0.5, per_mib=0.0)
"""Deadlines a test can wait out."""


class FaultyFileSystem(LocalFileSystem):
    """A local filesystem that raises, or sleeps, in one chosen method; counts the bytes
    it hands out."""

    protocol = ("faulty",)
    fault: tuple[str, str] | None = None
    bytes_read = 0

    def _maybe_fail(self, method: str) -> None:
        if self.fault is None or self.fault[0] != method:
            return
        kind = self.fault[1]
        if kind == "sleep":
            time.sleep(30)
        raise {
            "runtime": RuntimeError("the store's client broke"),
            "recursion": RecursionError("maximum recursion depth exceeded"),
            "exit": SystemExit(3),
            "type": TypeError("'NoneType' object is not subscriptable"),
        }[kind]


def _faulty(method: str) -> Any:
    def call(self: FaultyFileSystem, *args: Any, **kwargs: Any) -> Any:
        self._maybe_fail(method)
        result = getattr(LocalFileSystem, method)(self, *args, **kwargs)
        if method == "open":  # count what the store hands out
            read = result.read

            def counted(size: int = -1) -> Any:
                chunk = read(size)
                type(self).bytes_read += len(chunk)
                return chunk

            result.read = counted
        return result

    return call


for _method in ("info", "open", "makedirs", "put_file", "pipe_file", "mv"):
    setattr(FaultyFileSystem, _method, _faulty(_method))


@pytest.fixture
def faulty() -> Iterator[type[FaultyFileSystem]]:
    import fsspec

    fsspec.register_implementation("faulty", FaultyFileSystem, clobber=True)
    FaultyFileSystem.fault = None
    FaultyFileSystem.bytes_read = 0
    yield FaultyFileSystem
    FaultyFileSystem.fault = None


@pytest.fixture(scope="module")
def keypairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    base = tmp_path_factory.mktemp("keys")
    made = {}
    for name in ("K1", "K2"):
        generate_key_pair(base / f"{name}.pem", base / f"{name}.pub")
        made[name] = (base / f"{name}.pem", base / f"{name}.pub")
    return made


def trust_of(signing: Path | None = None, *trusted: Path) -> Any:
    env = {TRUSTED_KEYS_ENV: os.pathsep.join(str(p) for p in trusted)}
    if signing is not None:
        env[SIGNING_KEY_ENV] = str(signing)
    return load_trust(environ=env)


def store_at(
    root: Path,
    trust: Any,
    problems: list[str] | None = None,
    *,
    protocol: str = "file",
    not_before: float | None = None,
    deadlines: Deadlines = SHORT,
) -> RemoteStore:
    import fsspec

    fs, path = fsspec.core.url_to_fs(f"{protocol}://{root}")
    sink = problems if problems is not None else []
    return RemoteStore(
        f"{protocol}://{root}",
        fs,
        path,
        mode="readwrite",
        trust=trust,
        on_problem=sink.append,
        not_before=not_before,
        deadlines=deadlines,
    )


@pytest.fixture
def package(tmp_path: Path) -> Path:
    path = tmp_path / "package.pt2"
    path.write_bytes(os.urandom(4096))
    return path


@pytest.fixture
def published(
    tmp_path: Path, package: Path, keypairs: dict[str, tuple[Path, Path]]
) -> tuple[Path, Path]:
    """A store with one entry signed by K1, and that entry's folder."""
    root = tmp_path / "remote"
    assert store_at(root, trust_of(keypairs["K1"][0])).publish(KEY, package, CALLER)
    return root, root / "v1" / KEY


def reader(root: Path, keypairs: dict[str, tuple[Path, Path]], problems: list[str]) -> RemoteStore:
    return store_at(root, trust_of(None, keypairs["K1"][1]), problems)


def loads(root: Path, keypairs: dict[str, tuple[Path, Path]], tmp_path: Path) -> bool:
    return reader(root, keypairs, []).fetch(KEY, tmp_path / "check.pt2") is not None


# --- one boundary: faults at each call site -----------------------------------------------


@pytest.mark.parametrize("kind", ["runtime", "recursion", "exit", "type", "sleep"])
@pytest.mark.parametrize("method", ["info", "open"])
def test_a_fault_at_any_read_call_is_a_miss_with_one_problem_line(
    faulty: type[FaultyFileSystem],
    published: tuple[Path, Path],
    keypairs: dict[str, tuple[Path, Path]],
    tmp_path: Path,
    method: str,
    kind: str,
) -> None:
    root, _ = published
    problems: list[str] = []
    store = store_at(root, trust_of(None, keypairs["K1"][1]), problems, protocol="faulty")
    faulty.fault = (method, kind)
    started = time.monotonic()
    assert store.fetch(KEY, tmp_path / "out.pt2") is None
    assert time.monotonic() - started < 5  # the deadline, not the 30 s sleep
    failed = [p for p in problems if ": could not " in p]
    assert len(failed) == 1, problems
    assert failed[0].startswith(f"pytest-aoti remote cache faulty://{root}: could not ")
    assert store.stats.failures == 1 and store.stats.hits == 0
    assert store.stats.timeouts == (kind == "sleep")
    if kind == "sleep":  # a store that hung once is off: the next test does not wait again
        assert not store.readable
    assert not (tmp_path / "out.pt2").exists()
    faulty.fault = None
    if kind != "sleep":
        assert store.fetch(KEY, tmp_path / "out.pt2") is not None


@pytest.mark.parametrize("kind", ["runtime", "exit", "sleep"])
@pytest.mark.parametrize("method", ["makedirs", "put_file", "pipe_file", "mv"])
def test_a_fault_at_any_publish_call_publishes_nothing_half_written(
    faulty: type[FaultyFileSystem],
    keypairs: dict[str, tuple[Path, Path]],
    tmp_path: Path,
    package: Path,
    method: str,
    kind: str,
) -> None:
    root = tmp_path / "remote"
    problems: list[str] = []
    store = store_at(root, trust_of(keypairs["K1"][0]), problems, protocol="faulty")
    faulty.fault = (method, kind)
    started = time.monotonic()
    assert not store.publish(KEY, package, CALLER)
    assert time.monotonic() - started < 5
    assert len([p for p in problems if ": could not " in p]) == 1, problems
    assert store.stats.failures == 1 and store.stats.uploads == 0
    # never a manifest that names a package that is not there whole
    assert not (root / "v1" / KEY / "manifest.json").exists() or loads(root, keypairs, tmp_path)


def test_an_unusable_url_switches_the_store_off_with_one_line(tmp_path: Path) -> None:
    problems: list[str] = []
    store = open_remote(
        "ftp://alice:hunter2@x.invalid/y",
        mode="readwrite",
        ini_options=None,
        ini_trusted=(),
        on_problem=problems.append,
        deadlines=Deadlines(call=10.0),
    )
    assert not store.readable and not store.writable
    assert store.fetch(KEY, tmp_path / "p.pt2") is None
    (line,) = problems
    assert line.startswith("pytest-aoti remote cache ftp://***@x.invalid/y: could not open it (")
    assert line.endswith("; off for this run, compiled locally")
    with pytest.raises(pytest.UsageError, match=r"^--aoti-cache-url=nope://\*\*\*@h/p: "):
        open_remote(
            "nope://a:hunter2@h/p", mode="read", ini_options=None, ini_trusted=(), on_problem=print
        )


# --- bounded reads: hostile entries --------------------------------------------------------


def test_junk_beside_a_valid_signature_is_ignored(
    published: tuple[Path, Path], keypairs: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    root, entry_dir = published
    manifest = json.loads((entry_dir / "manifest.json").read_text())
    valid = manifest["signatures"][0]
    junk: list[Any] = ["junk", {"key_id": []}, {"key_id": "0" * 16, "ed25519": 5}, None, 7]
    junk.append({"key_id": valid["key_id"], "ed25519": base64.b64encode(b"x" * 64).decode()})
    manifest["signatures"] = [*junk, valid]
    (entry_dir / "manifest.json").write_text(json.dumps(manifest))
    assert loads(root, keypairs, tmp_path)
    # and a publisher reading it does not crash either: it loads it, so publishes nothing
    publisher = store_at(root, trust_of(keypairs["K1"][0]))
    assert publisher.fetch(KEY, tmp_path / "p.pt2") is not None


def hostile(entry_dir: Path, what: str) -> None:
    manifest = entry_dir / "manifest.json"
    (package,) = entry_dir.glob("package-*.pt2")
    if what == "nested":
        manifest.write_bytes(b"[" * 200_000)
    elif what == "nested-small":
        manifest.write_bytes(b"[" * 100 + b"]" * 100)
    elif what == "package-folder":
        package.unlink()
        package.mkdir()
    elif what == "manifest-fifo":
        manifest.unlink()
        os.mkfifo(manifest)
    elif what == "package-fifo":
        package.unlink()
        os.mkfifo(package)
    elif what == "huge-manifest":
        with open(manifest, "r+b") as f:
            f.truncate(3 * 2**29)  # 1.5 GiB, sparse
    elif what == "manifest-dev-zero":
        manifest.unlink()
        manifest.symlink_to("/dev/zero")
    elif what == "huge-package":
        with open(package, "r+b") as f:
            f.truncate(2 * 2**30)  # 2 GiB under the signed name, sparse
    elif what == "package-missing":
        package.unlink()
    elif what == "truncated-package":
        package.write_bytes(package.read_bytes()[:100])
    elif what == "torn-manifest":
        manifest.write_bytes(manifest.read_bytes()[:200])
    elif what == "nan-manifest":
        document = json.loads(manifest.read_text())
        document["entry"]["compile_seconds"] = float("nan")
        manifest.write_text(json.dumps(document))
    elif what == "newer-format":
        document = json.loads(manifest.read_text())
        document["entry"]["format_version"] = 99
        manifest.write_text(json.dumps(document))
    else:
        raise AssertionError(what)


HOSTILE = {
    "nested": ("its manifest nests deeper than this version reads", True),
    "nested-small": ("its manifest nests deeper than this version reads", True),
    "package-folder": ("its package is not a regular file (directory)", False),
    "manifest-fifo": ("its manifest is not a regular file (other)", False),
    "package-fifo": ("its package is not a regular file (other)", False),
    "huge-manifest": ("its manifest has 1610612736 bytes, more than the 1048576 it may have", True),
    "manifest-dev-zero": ("its manifest is not a regular file (other)", False),
    "huge-package": ("its package has 2147483648 bytes, more than the 4096 it may have", True),
    "package-missing": ("its package is missing", True),
    "truncated-package": ("its package has 100 bytes, the signed entry says 4096", True),
    "torn-manifest": ("its manifest is not JSON (damaged or half-written)", True),
    "nan-manifest": ("its manifest is not JSON (damaged or half-written)", True),
    # a newer release's entry is left to the readers that can read it
    "newer-format": (
        "its entry is of format version 99, this version reads 2 "
        "(entries of older versions are compiled again once)",
        False,
    ),
}


@pytest.mark.parametrize("what", sorted(HOSTILE))
def test_a_hostile_entry_is_refused_quickly_reading_little(
    faulty: type[FaultyFileSystem],
    published: tuple[Path, Path],
    keypairs: dict[str, tuple[Path, Path]],
    tmp_path: Path,
    what: str,
) -> None:
    root, entry_dir = published
    hostile(entry_dir, what)
    problems: list[str] = []
    store = store_at(
        root, trust_of(None, keypairs["K1"][1]), problems, protocol="faulty", deadlines=Deadlines()
    )
    started = time.monotonic()
    assert store.fetch(KEY, tmp_path / "out.pt2") is None
    assert time.monotonic() - started < 10
    assert faulty.bytes_read <= MANIFEST_LIMIT + 1
    reason, repairable = HOSTILE[what]
    assert problems == [
        f"pytest-aoti remote cache entry {KEY} at faulty://{root} not loaded: {reason}; "
        "compiled locally"
    ]
    assert store.stats.rejected == 1 and store.stats.failures == 0
    assert not list(tmp_path.glob("*out.pt2*"))
    # a trusted publisher replaces what is damaged, never what is not plainly so
    publisher = store_at(root, trust_of(keypairs["K1"][0]), protocol="faulty")
    assert publisher.fetch(KEY, tmp_path / "p.pt2") is None
    fresh = tmp_path / "fresh.pt2"
    fresh.write_bytes(os.urandom(4096))
    assert publisher.publish(KEY, fresh, CALLER) == repairable
    if repairable:
        assert loads(root, keypairs, tmp_path)


def test_a_package_larger_than_its_signed_size_is_not_read_past_it(
    published: tuple[Path, Path], keypairs: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    """A store whose listing says the signed size while it serves more."""
    root, entry_dir = published
    (package,) = entry_dir.glob("package-*.pt2")
    package.write_bytes(package.read_bytes() + os.urandom(8 * 2**20))
    served: list[int] = []

    class Lying(LocalFileSystem):
        def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
            found = dict(super().info(path, **kwargs))
            if path.endswith(".pt2"):
                found["size"] = 4096
            return found

        def open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
            handle = super().open(path, mode, **kwargs)
            if not path.endswith(".pt2"):
                return handle
            read = handle.read

            def counted(size: int = -1) -> bytes:
                chunk: bytes = read(size)
                served.append(len(chunk))
                return chunk

            handle.read = counted
            return handle

    problems: list[str] = []
    store = store_at(root, trust_of(None, keypairs["K1"][1]), problems)
    store._fs = Lying()
    assert store.fetch(KEY, tmp_path / "out.pt2") is None
    assert sum(served) == 4097
    assert problems[0].endswith(
        "not loaded: its package has more than the 4096 bytes the signed entry says; "
        "compiled locally"
    )


# --- freshness, revocation, format ----------------------------------------------------------


def test_an_entry_signed_before_not_before_is_refused_and_replaced(
    published: tuple[Path, Path],
    keypairs: dict[str, tuple[Path, Path]],
    tmp_path: Path,
    package: Path,
) -> None:
    root, entry_dir = published
    old = (entry_dir / "manifest.json").read_bytes()
    rotation = time.time() + 1  # after the entry was signed
    problems: list[str] = []
    reader = store_at(root, trust_of(None, keypairs["K1"][1]), problems, not_before=rotation)
    assert reader.fetch(KEY, tmp_path / "p.pt2") is None
    assert "not loaded: it was signed at " in problems[0]
    assert ", before the cache's not-before time " in problems[0]
    time.sleep(1.2)
    publisher = store_at(root, trust_of(keypairs["K1"][0]), not_before=rotation)
    assert publisher.fetch(KEY, tmp_path / "q.pt2") is None
    assert publisher.publish(KEY, package, CALLER)
    assert reader.fetch(KEY, tmp_path / "r.pt2") is not None
    # the older entry put back (a replay) is refused again
    (entry_dir / "manifest.json").write_bytes(old)
    assert reader.fetch(KEY, tmp_path / "s.pt2") is None


def test_an_entry_of_the_old_format_is_a_miss_once_then_replaced(
    published: tuple[Path, Path],
    keypairs: dict[str, tuple[Path, Path]],
    tmp_path: Path,
    package: Path,
) -> None:
    """Format 1 signed the canonical bytes alone: such a signature never verifies now."""
    root, entry_dir = published
    manifest = json.loads((entry_dir / "manifest.json").read_text())
    entry = {**manifest["entry"], "format_version": 1}
    trust = trust_of(keypairs["K1"][0])
    raw = trust.signing_key.sign(canonical_bytes(entry))
    old = {"key_id": trust.signing_key_id, "ed25519": base64.b64encode(raw).decode()}
    (entry_dir / "manifest.json").write_text(
        json.dumps({**manifest, "entry": entry, "signatures": [old]})
    )
    problems: list[str] = []
    assert reader(root, keypairs, problems).fetch(KEY, tmp_path / "p.pt2") is None
    assert "its entry is of format version 1, this version reads 2" in problems[0]
    # the domain string: the same entry claiming format 2 does not verify either
    (entry_dir / "manifest.json").write_text(
        json.dumps({**manifest, "entry": {**entry, "format_version": 2}, "signatures": [old]})
    )
    assert not loads(root, keypairs, tmp_path)
    publisher = store_at(root, trust_of(keypairs["K1"][0]))
    assert publisher.fetch(KEY, tmp_path / "q.pt2") is None
    assert publisher.publish(KEY, package, CALLER)
    assert loads(root, keypairs, tmp_path)


def test_an_entry_signed_by_another_key_is_never_overwritten(
    keypairs: dict[str, tuple[Path, Path]], tmp_path: Path, package: Path
) -> None:
    root = tmp_path / "remote"
    assert store_at(root, trust_of(keypairs["K2"][0])).publish(KEY, package, CALLER)
    before = (root / "v1" / KEY / "manifest.json").read_bytes()
    publisher = store_at(root, trust_of(keypairs["K1"][0]))
    assert publisher.fetch(KEY, tmp_path / "p.pt2") is None
    assert not publisher.publish(KEY, package, CALLER)
    assert (root / "v1" / KEY / "manifest.json").read_bytes() == before


def test_publishing_leaves_no_temporary_names(
    keypairs: dict[str, tuple[Path, Path]], tmp_path: Path, package: Path
) -> None:
    root = tmp_path / "remote"
    store = store_at(root, trust_of(keypairs["K1"][0]))
    for _ in range(3):
        assert store.publish(KEY, package, CALLER)
    names = sorted(p.name for p in (root / "v1" / KEY).iterdir())
    assert names[0] == "manifest.json" and len(names) == 2
    assert names[1].startswith("package-") and names[1].endswith(".pt2")


# --- keys and secrets -------------------------------------------------------------------------


def test_a_keys_file_with_several_keys_trusts_them_all(
    keypairs: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    both = tmp_path / "both.pub"
    both.write_text(keypairs["K1"][1].read_text() + "\n" + keypairs["K2"][1].read_text())
    trust = trust_of(None, both)
    ids = {trust_of(keypairs[name][0]).signing_key_id for name in ("K1", "K2")}
    assert set(trust.trusted) == ids


def test_an_unusable_key_is_never_printed(
    keypairs: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    pem = keypairs["K1"][0].read_text()
    body = "".join(pem.splitlines()[1:-1])
    secrets = [
        base64.b64encode(pem.encode()).decode(),  # a CI secret stored base64-encoded
        body,  # the key without its PEM lines
    ]
    for value in secrets:
        with pytest.raises(AotiUsageError) as raised:
            load_trust(environ={SIGNING_KEY_ENV: value})
        message = str(raised.value)
        assert message.startswith(f"{SIGNING_KEY_ENV} holds neither PEM text nor the path")
        assert value[:8] not in message and body[:8] not in message
    # quoted PEM text is PEM text
    quoted = load_trust(environ={SIGNING_KEY_ENV: f'"{pem}"'})
    assert quoted.signing_key_id == trust_of(keypairs["K1"][0]).signing_key_id
    # a private key put where public keys go
    with pytest.raises(AotiUsageError) as raised:
        load_trust(environ={TRUSTED_KEYS_ENV: pem})
    assert body[:8] not in str(raised.value)
    assert str(raised.value).startswith(
        f"{TRUSTED_KEYS_ENV}: key 1 of 1 in the PEM text given is not a PEM public key"
    )


def test_url_credentials_are_masked() -> None:
    from pytest_aoti.fleet.guard import describe

    error = OSError("Cannot connect to https://alice:hunter2@host/p\nmore")
    assert describe(error) == "OSError: Cannot connect to https://***@host/p"
    assert redact("https://alice:hunter2@host/p and s3://tok@b/x") == (
        "https://***@host/p and s3://***@b/x"
    )
    assert redact("https://h/p?X-Amz-Signature=abc&x=1") == "https://h/p?X-Amz-Signature=***&x=1"
    assert redact("file:///tmp/a@b") == "file:///tmp/a@b"
    # a password holding "@": nothing of it is left
    assert redact("ftp://user:p@ss@host/x") == "ftp://***@host/x"


def test_credentials_nested_anywhere_in_storage_options_are_refused() -> None:
    options = {
        "client_kwargs": {"endpoint_url": "http://h", "aws_secret_access_key": "x"},
        "config_kwargs": {"s3": {"addressing_style": "path"}},
        "headers": [{"Authorization-Token": "t"}],
        "use_ssl": False,
    }
    assert credential_options(options) == [
        "client_kwargs.aws_secret_access_key",
        "headers[0].Authorization-Token",
    ]
    assert credential_options({"client_kwargs": {"endpoint_url": "http://h"}}) == []
    # any spelling: headers, camelCase, cookies
    assert credential_options(
        {
            "headers": {"Authorization": "Bearer t", "Cookie": "c", "Accept": "x"},
            "AccountKey": "k",
            "AWSSecretAccessKey": "s",
            "EndpointUrl": "http://h",
        }
    ) == ["headers.Authorization", "headers.Cookie", "AccountKey", "AWSSecretAccessKey"]
    with pytest.raises(pytest.UsageError, match=r"client_kwargs\.aws_secret_access_key"):
        open_remote("s3://b/p", mode="read", ini_options=options, ini_trusted=(), on_problem=print)


def test_storage_options_that_are_not_json_are_not_echoed(pytester: pytest.Pytester) -> None:
    pytester.makeini('[pytest]\naoti_cache_storage_options = {"key": hunter2}\n')
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("--aoti-cache-url=file:///tmp/store")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*expected a JSON object (Expecting value at line 1 column 9)*"])
    assert "hunter2" not in result.stdout.str() + result.stderr.str()


def test_not_before_comes_from_the_option_or_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pytester: pytest.Pytester
) -> None:
    import datetime

    from pytest_aoti.fleet.open import NOT_BEFORE_ENV

    url = f"file://{tmp_path}/store"
    moment = datetime.datetime(2026, 12, 1, 12, tzinfo=datetime.timezone.utc).timestamp()
    monkeypatch.setenv(NOT_BEFORE_ENV, "2026-12-01T12:00:00Z")
    store = open_remote(url, mode="read", ini_options=None, ini_trusted=(), on_problem=print)
    assert store.not_before == moment
    given = open_remote(
        url, mode="read", ini_options=None, ini_trusted=(), on_problem=print, not_before=5.0
    )
    assert given.not_before == 5.0
    monkeypatch.setenv(NOT_BEFORE_ENV, "yesterday")
    with pytest.raises(pytest.UsageError, match=f"^{NOT_BEFORE_ENV}: expected an ISO 8601 UTC"):
        open_remote(url, mode="read", ini_options=None, ini_trusted=(), on_problem=print)
    monkeypatch.delenv(NOT_BEFORE_ENV)
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest(f"--aoti-cache-url={url}", "--aoti-cache-not-before=2026-12-01")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*expected an ISO 8601 UTC time such as 2026-12-01T12:00:00Z*"])
    pytester.makeini("[pytest]\naoti_cache_not_before = 2026-12-01T12:00:00Z\n")
    assert pytester.runpytest(f"--aoti-cache-url={url}").ret == pytest.ExitCode.OK
