"""The remote tier's rules without a compile: signatures and trust, the store on
``file://`` (publishing, tampering, torn writes, faults), options and usage errors, the C
library in the key, and merging shard reports."""

from __future__ import annotations

import json
import os
import platform
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fsspec")
# imported here, by the outer session: pytester drops modules first imported by an inner
# run, and cryptography's bindings break when imported a second time
pytest.importorskip("cryptography.hazmat.primitives.serialization")
pytest.importorskip("cryptography.hazmat.primitives.asymmetric.ed25519")

from pytest_aoti.errors import AotiUsageError, install_hint  # noqa: E402
from pytest_aoti.fleet.lines import (  # noqa: E402
    remote_header_line,
    remote_summary_lines,
    remote_totals,
)
from pytest_aoti.fleet.merge import ReportMergeError, merge_reports, summary_lines  # noqa: E402
from pytest_aoti.fleet.open import open_remote, storage_options  # noqa: E402
from pytest_aoti.fleet.signing import (  # noqa: E402
    SIGNING_KEY_ENV,
    TRUSTED_KEYS_ENV,
    canonical_bytes,
    generate_key_pair,
    load_trust,
)
from pytest_aoti.fleet.store import SWITCH_OFF_AFTER, RemoteStore  # noqa: E402
from pytest_aoti.reports.json_report import REPORT_VERSION  # noqa: E402

KEY = "0123456789abcdef0123456789abcdef01234567"
CALLER = {"signature": {"mutated_inputs": ["x"]}, "compile_seconds": 6.5}


@pytest.fixture
def keypairs(tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    made = {}
    for name in ("K1", "K2"):
        private, public = tmp_path / f"{name}.pem", tmp_path / f"{name}.pub"
        generate_key_pair(private, public)
        made[name] = (private, public)
    return made


def trust_of(signing: Path | None = None, *trusted: Path) -> Any:
    env = {TRUSTED_KEYS_ENV: os.pathsep.join(str(p) for p in trusted)}
    if signing is not None:
        env[SIGNING_KEY_ENV] = str(signing)
    return load_trust(environ=env)


def store_at(
    root: Path, trust: Any, mode: str = "readwrite", problems: list[str] | None = None
) -> RemoteStore:
    import fsspec

    fs, path = fsspec.core.url_to_fs(f"file://{root}")
    sink = problems if problems is not None else []
    return RemoteStore(f"file://{root}", fs, path, mode=mode, trust=trust, on_problem=sink.append)


@pytest.fixture
def package(tmp_path: Path) -> Path:
    path = tmp_path / "package.pt2"
    path.write_bytes(os.urandom(4096))
    return path


# --- signatures and trust ----------------------------------------------------------------


def test_canonical_bytes_do_not_depend_on_key_order() -> None:
    assert canonical_bytes({"b": 1, "a": [1, {"d": 2, "c": 3}]}) == canonical_bytes(
        {"a": [1, {"c": 3, "d": 2}], "b": 1}
    )
    assert canonical_bytes({"a": "é"}) == b'{"a":"\\u00e9"}'


def test_a_signature_covers_every_field(keypairs: dict[str, tuple[Path, Path]]) -> None:
    trust = trust_of(keypairs["K1"][0])
    document = {"key": KEY, "sha256": "0" * 64, "caller": CALLER}
    signatures = [trust.sign(document)]
    assert trust.verify(document, signatures) is None
    changed = {**document, "caller": {**CALLER, "compile_seconds": 1.0}}
    assert trust.verify(changed, signatures) == (
        f"its signature by key {trust.signing_key_id} does not verify"
    )
    assert trust.verify(document, []) == "it carries no signature"


def test_only_trusted_keys_count_and_a_publisher_trusts_its_own(
    keypairs: dict[str, tuple[Path, Path]],
) -> None:
    k1 = trust_of(keypairs["K1"][0])
    document = {"key": KEY}
    signed = [k1.sign(document)]
    reader_k2 = trust_of(None, keypairs["K2"][1])
    assert reader_k2.verify(document, signed) == (
        f"it is signed by key(s) {k1.signing_key_id}, none of them trusted here"
    )
    assert trust_of(None, keypairs["K2"][1], keypairs["K1"][1]).verify(document, signed) is None
    assert k1.trusted.keys() == {k1.signing_key_id}
    assert not trust_of().can_verify and not trust_of().can_sign


def test_a_signing_key_is_pem_text_or_a_path(
    keypairs: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    private = keypairs["K1"][0]
    from_text = load_trust(environ={SIGNING_KEY_ENV: private.read_text()})
    assert from_text.signing_key_id == trust_of(private).signing_key_id
    with pytest.raises(AotiUsageError, match=f"^{SIGNING_KEY_ENV} holds neither PEM text nor"):
        load_trust(environ={SIGNING_KEY_ENV: str(tmp_path / "missing.pem")})
    (tmp_path / "junk.pem").write_text("-----BEGIN PRIVATE KEY-----\nnope\n")
    with pytest.raises(AotiUsageError, match="not an unencrypted PEM private key"):
        load_trust(environ={SIGNING_KEY_ENV: str(tmp_path / "junk.pem")})
    with pytest.raises(AotiUsageError, match="aoti_cache_trusted_keys: .* is not a PEM public"):
        load_trust([str(private)], environ={})


# --- the store on file:// ---------------------------------------------------------------------


def test_publish_then_fetch_verifies_the_package(
    keypairs: dict[str, tuple[Path, Path]], tmp_path: Path, package: Path
) -> None:
    root = tmp_path / "remote"
    assert store_at(root, trust_of(keypairs["K1"][0])).publish(KEY, package, CALLER)
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert files[0] == f"v1/{KEY}/manifest.json"
    assert files[1].startswith(f"v1/{KEY}/package-") and len(files) == 2
    reader = store_at(root, trust_of(None, keypairs["K1"][1]))
    fetched = reader.fetch(KEY, tmp_path / "out" / "p.pt2")
    assert fetched is not None and fetched.caller == CALLER
    assert fetched.package_path.read_bytes() == package.read_bytes()
    assert reader.stats.hits == 1 and reader.stats.bytes_down == 4096
    assert reader.fetch("f" * 40, tmp_path / "other.pt2") is None
    assert reader.stats.misses == 1


def test_swapped_metadata_or_a_torn_manifest_is_never_loaded(
    keypairs: dict[str, tuple[Path, Path]], tmp_path: Path, package: Path
) -> None:
    root = tmp_path / "remote"
    store_at(root, trust_of(keypairs["K1"][0])).publish(KEY, package, CALLER)
    manifest_path = root / "v1" / KEY / "manifest.json"
    original = manifest_path.read_text()
    manifest = json.loads(original)
    manifest["entry"]["caller"]["signature"] = {"mutated_inputs": []}
    manifest_path.write_text(json.dumps(manifest))
    problems: list[str] = []
    reader = store_at(root, trust_of(None, keypairs["K1"][1]), problems=problems)
    destination = tmp_path / "p.pt2"
    assert reader.fetch(KEY, destination) is None and not destination.exists()
    manifest_path.write_text(original[: len(original) // 2])  # an interrupted write
    assert reader.fetch(KEY, destination) is None
    assert [p.split(" not loaded: ")[1] for p in problems] == [
        f"its signature by key {trust_of(keypairs['K1'][0]).signing_key_id} does not verify; "
        "compiled locally",
        "its manifest is not JSON (damaged or half-written); compiled locally",
    ]
    assert reader.stats.rejected == 2


def test_two_writers_leave_one_consistent_entry(
    keypairs: dict[str, tuple[Path, Path]], tmp_path: Path, package: Path
) -> None:
    root = tmp_path / "remote"
    other = tmp_path / "other.pt2"
    other.write_bytes(os.urandom(2048))  # AOTI packages differ between compiles
    writer = store_at(root, trust_of(keypairs["K1"][0]))
    assert writer.publish(KEY, package, CALLER) and writer.publish(KEY, other, CALLER)
    fetched = store_at(root, trust_of(None, keypairs["K1"][1])).fetch(KEY, tmp_path / "p.pt2")
    assert fetched is not None and fetched.package_path.read_bytes() == other.read_bytes()


def test_an_untrusted_entry_is_not_published_over(
    keypairs: dict[str, tuple[Path, Path]], tmp_path: Path, package: Path
) -> None:
    root = tmp_path / "remote"
    store_at(root, trust_of(keypairs["K1"][0])).publish(KEY, package, CALLER)
    before = (root / "v1" / KEY / "manifest.json").read_bytes()
    k2 = store_at(root, trust_of(keypairs["K2"][0]))
    assert k2.fetch(KEY, tmp_path / "p.pt2") is None
    assert not k2.publish(KEY, package, CALLER)
    assert (root / "v1" / KEY / "manifest.json").read_bytes() == before


def test_read_mode_no_signing_key_or_no_trusted_key(
    keypairs: dict[str, tuple[Path, Path]], tmp_path: Path, package: Path
) -> None:
    root = tmp_path / "remote"
    assert not store_at(root, trust_of(keypairs["K1"][0]), mode="read").publish(KEY, package, {})
    assert not store_at(root, trust_of(None, keypairs["K1"][1])).publish(KEY, package, {})
    assert not root.exists()
    assert not store_at(root, trust_of()).readable


def test_a_failing_store_is_reported_and_switched_off(
    keypairs: dict[str, tuple[Path, Path]], tmp_path: Path, package: Path
) -> None:
    blocker = tmp_path / "remote"
    blocker.write_text("a file where the store's directory should be")
    problems: list[str] = []
    store = store_at(blocker, trust_of(keypairs["K1"][0]), problems=problems)
    for number in range(SWITCH_OFF_AFTER):
        assert not store.publish(f"{number}{KEY[1:]}", package, CALLER)
    assert store.stats.failures == SWITCH_OFF_AFTER
    assert problems[0].startswith(f"pytest-aoti remote cache file://{blocker}: could not create ")
    assert problems[-1] == (
        f"pytest-aoti remote cache file://{blocker} switched off for the rest of the session "
        f"after {SWITCH_OFF_AFTER} failed calls in a row"
    )
    assert not store.readable and not store.writable
    assert store.fetch(KEY, tmp_path / "p.pt2") is None and store.stats.misses == 0


# --- options, header, summary -----------------------------------------------------------------


def test_storage_options_read_fsspec_variables_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FSSPEC_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    options = storage_options("s3", {"config_kwargs": {"read_timeout": 5}})
    assert options["endpoint_url"] == "http://127.0.0.1:9"
    assert options["config_kwargs"]["read_timeout"] == 5
    assert options["config_kwargs"]["connect_timeout"] > 0
    assert options["config_kwargs"]["retries"]["max_attempts"] == 2


def test_header_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SIGNING_KEY_ENV, raising=False)
    monkeypatch.delenv(TRUSTED_KEYS_ENV, raising=False)
    assert remote_header_line(None, "readwrite", ()) is None
    assert remote_header_line("s3://b/p", "readwrite", ()) == (
        f"aoti: remote cache s3://b/p (readwrite); loads nothing: no trusted key "
        f"({TRUSTED_KEYS_ENV}); publishes nothing: no signing key ({SIGNING_KEY_ENV})"
    )
    assert remote_header_line("https://h/p", "readwrite", ("k.pub",)) == (
        "aoti: remote cache https://h/p (readwrite); publishes nothing: read-only protocol"
    )


def test_a_not_before_time_in_the_future_is_said_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_aoti.fleet.feature import parse_utc_time
    from pytest_aoti.fleet.open import NOT_BEFORE_ENV

    monkeypatch.setenv(SIGNING_KEY_ENV, "k.pem")  # read by name only, never loaded
    monkeypatch.delenv(NOT_BEFORE_ENV, raising=False)
    future = parse_utc_time("2999-01-01T00:00:00Z")
    line = remote_header_line("s3://b/p", "readwrite", (), future)
    assert line == (
        "aoti: remote cache s3://b/p (readwrite); loads nothing: the not-before time "
        "2999-01-01T00:00:00Z is in the future"
    )
    # a time already past refuses only older entries: nothing to say
    past = parse_utc_time("2020-01-01T00:00:00Z")
    assert remote_header_line("s3://b/p", "readwrite", (), past) == (
        "aoti: remote cache s3://b/p (readwrite)"
    )
    # the summary says it too, for -q, where there is no header
    assert remote_summary_lines("s3://b/p", [], not_before=future) == [
        "aoti: remote cache s3://b/p (readwrite): loads nothing: the not-before time "
        "2999-01-01T00:00:00Z is in the future"
    ]
    # from the variable as well; one that is no time is left to the store's usage error
    monkeypatch.setenv(NOT_BEFORE_ENV, "2999-01-01T00:00:00Z")
    assert remote_header_line("s3://b/p", "readwrite", ()) == line
    monkeypatch.setenv(NOT_BEFORE_ENV, "soon")
    assert (
        remote_header_line("s3://b/p", "readwrite", ()) == "aoti: remote cache s3://b/p (readwrite)"
    )


def test_a_run_with_a_future_not_before_time_says_so_under_q(
    pytester: pytest.Pytester, keypairs: dict[str, tuple[Path, Path]]
) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    pytester.makeini(f"[pytest]\naoti_cache_trusted_keys = {keypairs['K1'][1]}\n")
    result = pytester.runpytest(
        "-q",
        f"--aoti-cache-url=file://{pytester.path}/remote",
        "--aoti-cache-remote=read",
        "--aoti-cache-not-before=2999-01-01T00:00:00Z",
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "aoti: remote cache file://*/remote (read): loads nothing: the not-before time "
            "2999-01-01T00:00:00Z is in the future"
        ]
    )
    assert result.stdout.str().count("is in the future") == 1


def test_totals_and_summary_sum_the_workers() -> None:
    figures = [{"remote": {"hits": 2, "bytes_down": 3 * 2**20, "seconds_down": 0.5}}, {}]
    figures.append({"remote": {"misses": 1, "uploads": 1, "failures": 1}})
    totals = remote_totals("s3://b/p", figures)["remote"]
    assert totals["hits"] == 2 and totals["uploads"] == 1 and totals["bytes_down"] == 3 * 2**20
    assert remote_totals(None, figures) == {}
    assert remote_summary_lines("s3://b/p", figures, mode="read", ini_trusted=("k.pub",)) == [
        "aoti: remote cache s3://b/p: 2 hits (3.0 MB in 0.50 s), 1 miss, 1 upload (0.0 MB in "
        "0.00 s), 1 failed call"
    ]
    assert remote_summary_lines(None, figures) == []


def test_credentials_in_the_ini_are_refused() -> None:
    with pytest.raises(pytest.UsageError, match=r"holds credentials \(key, secret\): remove them"):
        open_remote(
            "s3://b/p",
            mode="read",
            ini_options={"key": "AKIA", "secret": "x", "endpoint_url": "http://h"},
            ini_trusted=(),
            on_problem=print,
        )


def test_missing_protocol_package_is_a_usage_error() -> None:
    try:
        import gcsfs  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("gcsfs is installed")
    with pytest.raises(
        pytest.UsageError, match=re.escape(f"needs the 'gcsfs' package: {install_hint('gcs')}")
    ):
        open_remote("gs://b/p", mode="read", ini_options=None, ini_trusted=(), on_problem=print)


def test_bad_url_or_key_stops_the_run(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("--aoti-cache-url=bucket-without-scheme")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--aoti-cache-url: expected an fsspec URL such as s3://*"])
    (tmp_path / "bad.pub").write_text("not a key")
    pytester.makeini(f"[pytest]\naoti_cache_trusted_keys = {tmp_path / 'bad.pub'}\n")
    result = pytester.runpytest(f"--aoti-cache-url=file://{tmp_path}/r")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: ini option aoti_cache_trusted_keys: * is not a PEM public key*"]
    )


# --- the key -------------------------------------------------------------------------------


def test_the_c_library_is_in_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    from pytest_aoti.cache.key import platform_fingerprint, program_key

    libc, version = platform.libc_ver()
    assert f"{libc or 'libc'} {version or 'unknown'}" in platform_fingerprint()
    exported = torch.export.export(torch.nn.ReLU(), (torch.ones(2),))
    here = program_key(exported, device=torch.device("cpu"), inductor_configs={})
    monkeypatch.setattr(platform, "libc_ver", lambda *a, **k: ("glibc", "1.0"))
    elsewhere = program_key(exported, device=torch.device("cpu"), inductor_configs={})
    assert here.digest != elsewhere.digest
    assert {n for n in here.parts if here.parts[n] != elsewhere.parts[n]} == {"device"}


# --- merging shard reports -------------------------------------------------------------------


def shard(
    path: Path, checks: list[dict[str, Any]], compiled: int, version: int = REPORT_VERSION
) -> Path:
    document = {
        "version": version,
        "created": "2026-01-01T00:00:00+00:00",
        "devices": ["cpu"],
        "interrupted": False,
        "totals": {
            "programs": 1,
            "compiled": compiled,
            "compile_seconds": 6.0 * compiled,
            "loaded": 1 - compiled,
            "load_seconds": 0.1,
            "remote": {"hits": 1 - compiled},
        },
        "checks": checks,
    }
    path.write_text(json.dumps(document))
    return path


def check(test: str, source: str) -> dict[str, Any]:
    return {
        "test": test,
        "device": "cpu",
        "program": "p1",
        "cache_hit": source != "compiled",
        "compile_seconds": 6.0 if source == "compiled" else 0.0,
        "original_compile_seconds": 6.0,
        "check_seconds": 1.0,
        "source": source,
    }


def test_shards_merge_like_xdist_workers(tmp_path: Path) -> None:
    first = shard(tmp_path / "shard-1.json", [check("t.py::a", "compiled")], compiled=1)
    second = shard(tmp_path / "shard-2.json", [check("t.py::b", "remote")], compiled=0)
    merged = merge_reports([first, second])
    assert [c["test"] for c in merged["checks"]] == ["t.py::a", "t.py::b"]
    assert merged["totals"]["programs"] == 1  # the same program on both shards
    assert merged["totals"]["compiled"] == 1 and merged["totals"]["loaded"] == 1
    assert merged["totals"]["remote"] == {"hits": 1}
    assert summary_lines(merged)[-2:] == [
        "aoti: 2 checks (0 failed) from 2 reports; 1 program; 1 compiled in 6.0 s; "
        "1 loaded from cache in 0.20 s",
        "aoti: remote cache: 1 hits, 0 misses, 0 uploads, 0 rejected",
    ]


def test_a_workers_remote_figures_ride_on_its_payload() -> None:
    from pytest_aoti.reports.collector import ReportCollector

    worker = ReportCollector()
    payload = worker.payload(None, [], {"remote": {"hits": 2, "uploads": 1}})
    json.dumps(payload)  # plain data: what execnet carries
    controller = ReportCollector()
    controller.merge(payload)
    controller.merge(worker.payload(None, []))  # a worker without a remote store
    figures = controller.figures({})
    assert figures == [{"remote": {"hits": 2, "uploads": 1}}]
    assert remote_totals("s3://b/p", figures)["remote"]["hits"] == 2


def test_merged_shards_keep_their_compiles_and_sources(tmp_path: Path) -> None:
    path = shard(tmp_path / "s.json", [check("t.py::a", "remote")], compiled=0)
    document = json.loads(path.read_text())
    document["compiles"] = [
        {
            "test": "t.py::c",
            "device": "cpu",
            "program": "p2",
            "cache_hit": False,
            "compile_seconds": 6.0,
            "original_compile_seconds": 6.0,
            "source": "compiled",
        }
    ]
    path.write_text(json.dumps(document))
    merged = merge_reports([path])
    assert [c["source"] for c in merged["checks"]] == ["remote"]
    assert [c["source"] for c in merged["compiles"]] == ["compiled"]
    assert merged["totals"]["programs"] == 2 and merged["merged_from"] == [str(path)]


def test_unknown_schema_versions_and_non_reports_are_refused(tmp_path: Path) -> None:
    old = shard(tmp_path / "old.json", [], compiled=0, version=REPORT_VERSION + 1)
    with pytest.raises(
        ReportMergeError, match=f"old.json: report schema version {REPORT_VERSION + 1}"
    ):
        merge_reports([old])
    (tmp_path / "junk.json").write_text("[1, 2]")
    with pytest.raises(ReportMergeError, match="junk.json: not a pytest-aoti report"):
        merge_reports([tmp_path / "junk.json"])
    with pytest.raises(ReportMergeError, match="missing.json: cannot read it"):
        merge_reports([tmp_path / "missing.json"])


@pytest.mark.parametrize(
    ("hidden", "message"),
    [
        ("fsspec", "--aoti-cache-url needs the 'fsspec' package: " + install_hint("remote")),
        (
            "cryptography.hazmat.primitives.asymmetric",
            "signed remote cache entries need the 'cryptography' package: "
            + install_hint("remote"),
        ),
    ],
)
def test_a_missing_package_is_a_usage_error_naming_it(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    keypairs: dict[str, tuple[Path, Path]],
    hidden: str,
    message: str,
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, hidden, None)  # what an absent package raises: ImportError
    monkeypatch.setenv(TRUSTED_KEYS_ENV, str(keypairs["K1"][1]))
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest(f"--aoti-cache-url=file://{pytester.path}/remote")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])
    # without the remote store, the plugin never needs them
    assert pytester.runpytest().ret == pytest.ExitCode.OK
