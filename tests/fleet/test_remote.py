"""The fleet's remote store end to end: real pytest sessions against moto's S3 server
(through s3fs) and against ``file://``, with Ed25519 keys made here.

Machine A compiles for real, once per module, and publishes. Every later "machine" is an
inner pytest session with an empty local cache of its own. Where a scenario must compile
(it trusts another key, reads a tampered entry, finds the store down), a conftest replaces
the torch compile step, and only that step, by a copy of A's package (``FAKE_COMPILE``);
the registry, both stores, signing, verification, downloads and uploads run for real, and
"N compiled" in the summary still counts the registry's compiles.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fsspec")
# imported by the outer session: pytester drops modules first imported by an inner run
pytest.importorskip("cryptography.hazmat.primitives.serialization")
pytest.importorskip("cryptography.hazmat.primitives.asymmetric.ed25519")

from pytest_aoti.fleet.signing import (  # noqa: E402
    SIGNING_KEY_ENV,
    TRUSTED_KEYS_ENV,
    generate_key_pair,
)

MODEL = textwrap.dedent(
    """
    import torch


    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.tensor([[1.0, -2.0], [0.5, 3.0]]))

        def forward(self, x):
            x.mul_(2)
            return torch.cos(x @ self.weight)


    def example():
        return torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])


    def test_model(aoti):
        program = aoti.compile(Model(), (example(),))
        assert program.mutated_inputs == {"x"}
        aoti.check(Model(), (example(),), mutates={"x": example() * 2})
    """
)

FAKE_COMPILE = textwrap.dedent(
    """
    import shutil

    import pytest
    import pytest_aoti.cache.registry

    GOLDEN_PACKAGE = {package!r}


    @pytest.fixture(autouse=True)
    def _compile_by_copying_the_golden_package(monkeypatch):
        def compile_package(decomposed, package_path, inductor_configs):
            shutil.copyfile(GOLDEN_PACKAGE, package_path)
            return package_path

        monkeypatch.setattr(pytest_aoti.cache.registry, "compile_package", compile_package)
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    """moto's standalone S3 server on 127.0.0.1 and a free port, for this module."""
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("moto's server did not start")
                time.sleep(0.1)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=10)


@dataclass(frozen=True)
class Keys:
    private: Path
    public: Path


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Keys]:
    """Two publishers' key pairs, K1 and K2."""
    base = tmp_path_factory.mktemp("keys")
    made = {}
    for name in ("K1", "K2"):
        generate_key_pair(base / f"{name}.pem", base / f"{name}.pub")
        made[name] = Keys(base / f"{name}.pem", base / f"{name}.pub")
    return made


def s3(endpoint: str) -> Any:
    import s3fs

    return s3fs.S3FileSystem(
        endpoint_url=endpoint, key="test", secret="test", skip_instance_cache=True
    )


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, moto_endpoint: str) -> str:
    """s3fs pointed at moto through fsspec's own variables, with dummy credentials."""
    monkeypatch.setenv("FSSPEC_S3_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv(SIGNING_KEY_ENV, raising=False)
    monkeypatch.delenv(TRUSTED_KEYS_ENV, raising=False)
    return moto_endpoint


@dataclass(frozen=True)
class Fleet:
    bucket: str
    url: str
    package: Path
    """A copy of A's compiled package, outside any cache."""
    key: str
    report: Path
    """Machine A's JSON report."""


def run_machine(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    url: str,
    *args: str,
    signing: Path | None = None,
    trusted: tuple[Path, ...] = (),
) -> tuple[pytest.RunResult, dict[str, Any]]:
    """One CI machine: an inner pytest session with an empty local cache of its own."""
    if signing is None:
        monkeypatch.delenv(SIGNING_KEY_ENV, raising=False)
    else:
        monkeypatch.setenv(SIGNING_KEY_ENV, str(signing))
    monkeypatch.setenv(TRUSTED_KEYS_ENV, os.pathsep.join(str(p) for p in trusted))
    base = pytester.path / name
    report = base / "report.json"
    result = pytester.runpytest(
        "--aoti-device=cpu",
        f"--aoti-cache-dir={base / 'cache'}",
        f"--aoti-cache-url={url}",
        f"--aoti-report={report}",
        *args,
    )
    document = json.loads(report.read_text()) if report.exists() else {}
    return result, document


def summary(document: dict[str, Any]) -> tuple[int, list[str]]:
    """Compiles of a session, and where each check's package came from."""
    return document["totals"]["compiled"], [check["source"] for check in document["checks"]]


@pytest.fixture(scope="module")
def _fleet_memo() -> dict[str, Fleet | str]:
    return {}


@pytest.fixture
def fleet(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    aws_env: str,
    keys: dict[str, Keys],
    tmp_path_factory: pytest.TempPathFactory,
    _fleet_memo: dict[str, Fleet | str],
) -> Fleet:
    """Machine A: empty local cache, signing key K1, compiles for real and publishes."""
    if "fleet" not in _fleet_memo:
        _fleet_memo["fleet"] = "machine A failed in an earlier test"
        s3(aws_env).mkdir("fleet-bucket")
        url = "s3://fleet-bucket/ci"
        pytester.makepyfile(test_model=MODEL)
        result, document = run_machine(pytester, monkeypatch, "A", url, signing=keys["K1"].private)
        result.assert_outcomes(passed=1)
        assert summary(document) == (1, ["compiled"])
        result.stdout.fnmatch_lines([f"aoti: remote cache {url}: 0 hits *, 1 miss, 1 upload *"])
        (manifest,) = s3(aws_env).glob("fleet-bucket/ci/v1/*/manifest.json")
        key = manifest.split("/")[-2]
        (package,) = (pytester.path / "A" / "cache").glob(f"v*/entries/{key}/package.pt2")
        keep = tmp_path_factory.mktemp("fleet")
        shutil.copyfile(package, keep / "package.pt2")
        shutil.copyfile(pytester.path / "A" / "report.json", keep / "A.json")
        _fleet_memo["fleet"] = Fleet(
            "fleet-bucket", url, keep / "package.pt2", key, keep / "A.json"
        )
    found = _fleet_memo["fleet"]
    if isinstance(found, str):
        pytest.fail(found)
    pytester.makepyfile(test_model=MODEL)
    return found


def fake_compile(pytester: pytest.Pytester, fleet: Fleet) -> None:
    pytester.makeconftest(FAKE_COMPILE.format(package=str(fleet.package)))


def bucket_listing(endpoint: str, prefix: str) -> dict[str, str]:
    fs = s3(endpoint)
    return {path: fs.cat_file(path).hex()[:64] for path in fs.find(prefix)}


# --- against moto's S3 ---------------------------------------------------------------------


@pytest.mark.compiles
def test_b_with_an_empty_cache_compiles_nothing(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    fleet: Fleet,
    keys: dict[str, Keys],
    aws_env: str,
) -> None:
    result, document = run_machine(
        pytester, monkeypatch, "B", fleet.url, trusted=(keys["K1"].public,)
    )
    result.assert_outcomes(passed=1)
    assert summary(document) == (0, ["remote"])
    assert document["totals"]["remote"]["hits"] == 1
    assert document["totals"]["remote"]["uploads"] == 0
    result.stdout.fnmatch_lines(
        [
            "*aoti: remote cache s3://fleet-bucket/ci (readwrite); publishes nothing: no signing key*",
            "aoti: 1 program; 0 compiled in 0.0 s; 1 loaded from cache in *",
            "aoti: remote cache s3://fleet-bucket/ci: 1 hit (*), 0 misses, 0 uploads *",
        ]
    )
    # the download went into B's local cache: the next run on B loads it from there
    again, document = run_machine(
        pytester, monkeypatch, "B", fleet.url, trusted=(keys["K1"].public,)
    )
    again.assert_outcomes(passed=1)
    assert summary(document) == (0, ["local"])


@pytest.mark.compiles
def test_c_trusting_another_key_loads_nothing_and_does_not_publish_over(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    fleet: Fleet,
    keys: dict[str, Keys],
    aws_env: str,
) -> None:
    fake_compile(pytester, fleet)
    before = bucket_listing(aws_env, f"{fleet.bucket}/ci")
    result, document = run_machine(
        pytester, monkeypatch, "C", fleet.url, signing=keys["K2"].private
    )
    result.assert_outcomes(passed=1)
    assert summary(document) == (1, ["compiled"])
    result.stdout.fnmatch_lines(
        [
            "*aoti: cache problems (worked around; no test failed)*",
            f"pytest-aoti remote cache entry {fleet.key} at {fleet.url} not loaded: it is signed "
            "by key(s) *, none of them trusted here; compiled locally",
        ]
    )
    assert bucket_listing(aws_env, f"{fleet.bucket}/ci") == before


@pytest.mark.compiles
def test_a_tampered_package_is_never_loaded(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    fleet: Fleet,
    keys: dict[str, Keys],
    aws_env: str,
) -> None:
    fs = s3(aws_env)
    source = f"{fleet.bucket}/ci/v1/{fleet.key}"
    for path in fs.find(source):
        fs.copy(path, path.replace("/ci/", "/tampered/"))
    (package,) = fs.glob(f"{fleet.bucket}/tampered/v1/{fleet.key}/package-*.pt2")
    data = bytearray(fs.cat_file(package))
    data[len(data) // 2] ^= 0xFF
    fs.pipe_file(package, bytes(data))
    fake_compile(pytester, fleet)
    url = f"s3://{fleet.bucket}/tampered"
    result, document = run_machine(pytester, monkeypatch, "D", url, trusted=(keys["K1"].public,))
    result.assert_outcomes(passed=1)
    assert summary(document) == (1, ["compiled"])
    assert document["totals"]["remote"]["rejected"] == 1
    result.stdout.fnmatch_lines(
        [f"*{fleet.key} at {url} not loaded: its package does not match the signed checksum*"]
    )


@pytest.mark.compiles
def test_a_read_job_writes_nothing(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    fleet: Fleet,
    keys: dict[str, Keys],
    aws_env: str,
) -> None:
    fake_compile(pytester, fleet)
    url = f"s3://{fleet.bucket}/read-only"
    result, document = run_machine(
        pytester, monkeypatch, "R", url, "--aoti-cache-remote=read", signing=keys["K1"].private
    )
    result.assert_outcomes(passed=1)
    assert summary(document) == (1, ["compiled"])
    assert document["totals"]["remote"]["misses"] == 1
    assert s3(aws_env).find(f"{fleet.bucket}/read-only") == []


@pytest.mark.compiles
def test_a_store_that_is_down_passes_with_a_summary_line(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    fleet: Fleet,
    keys: dict[str, Keys],
) -> None:
    fake_compile(pytester, fleet)
    monkeypatch.setenv("FSSPEC_S3_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    result, document = run_machine(
        pytester, monkeypatch, "X", fleet.url, signing=keys["K1"].private
    )
    result.assert_outcomes(passed=1)
    assert summary(document) == (1, ["compiled"])
    # the lookup failed; nothing is published over an entry that could not be read
    assert document["totals"]["remote"]["failures"] == 1
    assert document["totals"]["remote"]["uploads"] == 0
    result.stdout.fnmatch_lines(
        [
            "*aoti: cache problems (worked around; no test failed)*",
            f"pytest-aoti remote cache {fleet.url}: could not look up the manifest of "
            f"{fleet.key[:12]} (EndpointConnectionError: *); compiled locally",
        ]
    )


@pytest.mark.compiles
def test_two_shards_reports_merge_into_one(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    fleet: Fleet,
    keys: dict[str, Keys],
    aws_env: str,
) -> None:
    result, document = run_machine(
        pytester, monkeypatch, "S2", fleet.url, trusted=(keys["K1"].public,)
    )
    result.assert_outcomes(passed=1)
    merged = pytester.path / "all.json"
    command = [sys.executable, "-m", "pytest_aoti", "merge-reports"]
    done = subprocess.run(
        [*command, str(fleet.report), str(pytester.path / "S2" / "report.json"), "-o", str(merged)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "aoti: slowest 5 AOTI checks" in lines
    assert any(
        line.startswith("aoti: 2 checks (0 failed) from 2 reports; 1 program; 1 compiled in ")
        and "; 1 loaded from cache in " in line
        for line in lines
    ), lines
    assert "aoti: remote cache: 1 hits, 1 misses, 1 uploads, 0 rejected" in lines
    together = json.loads(merged.read_text())
    assert sorted(check["source"] for check in together["checks"]) == ["compiled", "remote"]
    assert together["totals"]["compiled"] == 1 and together["totals"]["programs"] == 1
    # a report of another schema version is refused, naming the file
    future = pytester.path / "future.json"
    future.write_text(json.dumps({**together, "version": 99}))
    refused = subprocess.run(
        [*command, str(fleet.report), str(future)], capture_output=True, text=True, check=False
    )
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"error: {future}: report schema version 99, ")


@pytest.mark.compiles
def test_xdist_workers_of_one_machine_download_once(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    fleet: Fleet,
    keys: dict[str, Keys],
    aws_env: str,
) -> None:
    pytest.importorskip("xdist")
    # every test on both workers: each asks for the program; one downloads it, under the
    # local cache's lock, and the other then finds it in the local cache
    result, document = run_machine(
        pytester,
        monkeypatch,
        "W",
        fleet.url,
        "-n",
        "2",
        "--dist=each",
        trusted=(keys["K1"].public,),
    )
    result.assert_outcomes(passed=2)
    assert document["totals"]["compiled"] == 0
    assert document["totals"]["remote"]["hits"] == 1 and document["totals"]["remote"]["misses"] == 0
    assert sorted(check["source"] for check in document["checks"]) == ["local", "remote"]
    result.stdout.fnmatch_lines(["aoti: remote cache s3://fleet-bucket/ci: 1 hit (*), 0 misses, *"])


# --- file:// ---------------------------------------------------------------------------------


@pytest.mark.compiles
def test_file_url_publishes_and_serves_signed_entries(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    fleet: Fleet,
    keys: dict[str, Keys],
) -> None:
    fake_compile(pytester, fleet)
    shared = pytester.path / "shared"
    url = f"file://{shared}"
    first, document = run_machine(pytester, monkeypatch, "F1", url, signing=keys["K2"].private)
    first.assert_outcomes(passed=1)
    assert summary(document) == (1, ["compiled"])
    assert len(list(shared.glob("v1/*/manifest.json"))) == 1
    second, document = run_machine(pytester, monkeypatch, "F2", url, trusted=(keys["K2"].public,))
    second.assert_outcomes(passed=1)
    assert summary(document) == (0, ["remote"])
    # file:// needs signatures too: without a trusted key nothing is loaded
    third, document = run_machine(pytester, monkeypatch, "F3", url)
    third.assert_outcomes(passed=1)
    assert summary(document) == (1, ["compiled"])
    third.stdout.fnmatch_lines(["*aoti: remote cache file://* loads nothing: no trusted key*"])


@pytest.mark.compiles
def test_a_signed_package_that_does_not_load_here_is_compiled_instead(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    fleet: Fleet,
    keys: dict[str, Keys],
    aws_env: str,
) -> None:
    """As a package built against another C library would: signed, verified, unloadable."""
    import fsspec

    from pytest_aoti.fleet.signing import load_trust
    from pytest_aoti.fleet.store import RemoteStore

    manifest = json.loads(s3(aws_env).cat_file(f"{fleet.bucket}/ci/v1/{fleet.key}/manifest.json"))
    broken = pytester.path / "broken.pt2"
    broken.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip: no AOTI package in it
    shared = pytester.path / "shared"
    fs, root = fsspec.core.url_to_fs(f"file://{shared}")
    publisher = RemoteStore(
        f"file://{shared}",
        fs,
        root,
        mode="readwrite",
        trust=load_trust(environ={SIGNING_KEY_ENV: str(keys["K1"].private)}),
        on_problem=pytest.fail,
    )
    assert publisher.publish(fleet.key, broken, manifest["entry"]["caller"])
    fake_compile(pytester, fleet)
    url = f"file://{shared}"
    result, document = run_machine(pytester, monkeypatch, "L", url, trusted=(keys["K1"].public,))
    result.assert_outcomes(passed=1)
    assert summary(document) == (1, ["compiled"])
    assert document["totals"]["remote"]["rejected"] == 1
    result.stdout.fnmatch_lines(
        [f"*{fleet.key} at {url} not loaded: its package does not load on this machine (*"]
    )
    assert document["totals"]["remote"]["hits"] == 0
    # what the local cache keeps is the local compile, not the package that did not load
    (kept,) = (pytester.path / "L" / "cache").glob(f"v*/entries/{fleet.key}/package.pt2")
    assert kept.read_bytes() == fleet.package.read_bytes()


# --- the store survives its writers ----------------------------------------------------------

TWO_CHECKS = MODEL.replace("def test_model(aoti):", "def _unused(aoti):") + textwrap.dedent(
    """

    class Wrong(Model):
        # the golden package computes cos: this program's engine will not match its eager
        def forward(self, x):
            x.mul_(2)
            return torch.sin(x @ self.weight)


    def test_the_users_own_assertion_fails_after_a_passing_check(aoti):
        aoti.check(Model(), (example(),), mutates={"x": example() * 2})
        assert False, "the user's own assertion"


    def test_a_failing_check(aoti):
        aoti.check(Wrong(), (example(),), mutates={"x": example() * 2})
    """
)

FAULTY_STORE = textwrap.dedent(
    """
    import functools
    import time

    import fsspec
    from fsspec.implementations.local import LocalFileSystem

    import pytest_aoti.fleet.open as remote_open

    FAULT = {fault!r}


    class FaultyFileSystem(LocalFileSystem):
        protocol = ("faulty",)


    def _faulty(method, kind):
        def call(self, *args, **kwargs):
            if kind == "sleep":
                time.sleep(600)
            raise RuntimeError("the store's client broke")

        return call


    setattr(FaultyFileSystem, FAULT[0], _faulty(*FAULT))


    def pytest_configure(config):
        fsspec.register_implementation("faulty", FaultyFileSystem, clobber=True)
        original = remote_open.Deadlines
        remote_open.Deadlines = functools.partial(original, call=2.0, transfer=2.0)
        config.add_cleanup(lambda: setattr(remote_open, "Deadlines", original))
    """
)


def published_keys(root: Path) -> set[str]:
    return {path.parent.name for path in root.glob("v1/*/manifest.json")}


@pytest.mark.compiles
def test_only_a_program_whose_check_passed_here_is_published(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    fleet: Fleet,
    keys: dict[str, Keys],
) -> None:
    fake_compile(pytester, fleet)
    pytester.makepyfile(test_model=TWO_CHECKS)
    shared = pytester.path / "shared"
    result, document = run_machine(
        pytester, monkeypatch, "P", f"file://{shared}", "-q", signing=keys["K1"].private
    )
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*the user's own assertion*", "aoti: * compiled in *"])
    # the passing check's program, and neither the failing one nor its instrumented compile
    assert published_keys(shared) == {fleet.key}
    assert document["totals"]["remote"]["uploads"] == 1


@pytest.mark.compiles
def test_a_torn_manifest_is_replaced_by_the_next_trusted_publisher(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    fleet: Fleet,
    keys: dict[str, Keys],
    aws_env: str,
) -> None:
    fs = s3(aws_env)
    for path in fs.find(f"{fleet.bucket}/ci/v1/{fleet.key}"):
        fs.copy(path, path.replace("/ci/", "/torn/"))
    manifest = f"{fleet.bucket}/torn/v1/{fleet.key}/manifest.json"
    fs.pipe_file(manifest, fs.cat_file(manifest)[:300])
    fake_compile(pytester, fleet)
    url = f"s3://{fleet.bucket}/torn"
    result, document = run_machine(pytester, monkeypatch, "T", url, signing=keys["K1"].private)
    result.assert_outcomes(passed=1)
    assert summary(document) == (1, ["compiled"])
    result.stdout.fnmatch_lines(
        [
            f"*{fleet.key} at {url} not loaded: its manifest is not JSON (damaged or "
            "half-written); compiled locally, to be replaced"
        ]
    )
    assert document["totals"]["remote"]["uploads"] == 1
    reader, document = run_machine(pytester, monkeypatch, "U", url, trusted=(keys["K1"].public,))
    reader.assert_outcomes(passed=1)
    assert summary(document) == (0, ["remote"])


@pytest.mark.compiles
@pytest.mark.parametrize(
    ("hostile", "loaded", "reason"),
    [
        ("junk signatures", True, ""),
        ("nested", False, "its manifest nests deeper than this version reads"),
        ("longer package", False, "its package has * bytes, more than the * it may have"),
    ],
)
def test_a_hostile_entry_on_s3_never_fails_a_test(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    fleet: Fleet,
    keys: dict[str, Keys],
    aws_env: str,
    hostile: str,
    loaded: bool,
    reason: str,
) -> None:
    fs = s3(aws_env)
    prefix = f"{fleet.bucket}/{hostile.replace(' ', '-')}"
    for path in fs.find(f"{fleet.bucket}/ci/v1/{fleet.key}"):
        fs.copy(path, path.replace(f"{fleet.bucket}/ci", prefix))
    manifest_path = f"{prefix}/v1/{fleet.key}/manifest.json"
    if hostile == "junk signatures":
        manifest = json.loads(fs.cat_file(manifest_path))
        manifest["signatures"] = ["junk", {"key_id": []}, *manifest["signatures"]]
        fs.pipe_file(manifest_path, json.dumps(manifest).encode())
    elif hostile == "nested":
        fs.pipe_file(manifest_path, b"[" * 200_000)
    else:
        (package,) = fs.glob(f"{prefix}/v1/{fleet.key}/package-*.pt2")
        fs.pipe_file(package, fs.cat_file(package) + bytes(2**20))
    fake_compile(pytester, fleet)
    url = f"s3://{prefix}"
    started = time.monotonic()
    result, document = run_machine(pytester, monkeypatch, "H", url, trusted=(keys["K1"].public,))
    assert time.monotonic() - started < 60
    result.assert_outcomes(passed=1)
    assert summary(document) == ((0, ["remote"]) if loaded else (1, ["compiled"]))
    if not loaded:
        result.stdout.fnmatch_lines([f"*{fleet.key} at {url} not loaded: {reason}; compiled*"])


@pytest.mark.compiles
@pytest.mark.parametrize(("method", "kind"), [("info", "sleep"), ("put_file", "raise")])
def test_a_store_that_raises_or_hangs_never_fails_a_test_nor_holds_the_exit(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    fleet: Fleet,
    keys: dict[str, Keys],
    method: str,
    kind: str,
) -> None:
    pytester.makeconftest(
        FAKE_COMPILE.format(package=str(fleet.package)) + FAULTY_STORE.format(fault=(method, kind))
    )
    shared = pytester.path / "faulty-store"
    shared.mkdir()
    monkeypatch.setenv(SIGNING_KEY_ENV, str(keys["K1"].private))
    report = pytester.path / "report.json"
    started = time.monotonic()
    # a process of its own: a call still sleeping in its thread must not hold up the exit
    result = pytester.runpytest_subprocess(
        "--aoti-device=cpu",
        f"--aoti-cache-dir={pytester.path / 'cache'}",
        f"--aoti-cache-url=faulty://{shared}",
        f"--aoti-report={report}",
        "-q",
        timeout=240,
    )
    assert time.monotonic() - started < 200
    result.assert_outcomes(passed=1)
    remote = json.loads(report.read_text())["totals"]["remote"]
    assert remote["failures"] == 1 and remote["timeouts"] == (kind == "sleep")
    what = "look up the manifest of" if method == "info" else "upload"
    cause = "no answer within 2 s" if kind == "sleep" else "RuntimeError: the store's client broke"
    result.stdout.fnmatch_lines(
        [
            "*aoti: cache problems (worked around; no test failed)*",
            f"pytest-aoti remote cache faulty://{shared}: could not {what} {fleet.key[:12]} "
            f"({cause}); compiled locally",
            "aoti: 1 program; 1 compiled in *",
        ]
    )


def test_an_unusable_url_is_a_problem_line_and_a_quiet_run_says_the_store_is_off(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SIGNING_KEY_ENV, raising=False)
    monkeypatch.delenv(TRUSTED_KEYS_ENV, raising=False)
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("--aoti-cache-url=ftp://x/y", "-q")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "*aoti: cache problems (worked around; no test failed)*",
            "pytest-aoti remote cache ftp://x/y: could not open it (*); off for this run, "
            "compiled locally",
            "aoti: remote cache ftp://x/y (readwrite): loads nothing: no trusted key "
            f"({TRUSTED_KEYS_ENV}); publishes nothing: no signing key ({SIGNING_KEY_ENV})",
        ]
    )
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


@pytest.mark.compiles
def test_url_credentials_are_never_printed_nor_written(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    fleet: Fleet,
    keys: dict[str, Keys],
) -> None:
    pytest.importorskip("aiohttp")
    fake_compile(pytester, fleet)
    url = f"http://alice:hunter2@127.0.0.1:{free_port()}/store"
    junit = pytester.path / "junit.xml"
    result, document = run_machine(
        pytester, monkeypatch, "S", url, f"--junitxml={junit}", trusted=(keys["K1"].public,)
    )
    result.assert_outcomes(passed=1)
    masked = url.replace("alice:hunter2", "***")
    result.stdout.fnmatch_lines(
        [
            f"aoti: remote cache {masked} (readwrite); publishes nothing: read-only protocol",
            f"aoti: remote cache {masked}: 0 hits (*), 1 miss, *",
        ]
    )
    written = [result.stdout.str(), result.stderr.str(), json.dumps(document), junit.read_text()]
    assert not [text for text in written if "hunter2" in text or "alice" in text]
    # a usage error masks it too
    refused = pytester.runpytest(f"--aoti-cache-url={url.replace('http', 'nope', 1)}")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    assert "hunter2" not in refused.stdout.str() + refused.stderr.str()
