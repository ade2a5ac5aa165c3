"""Golden records: ``--aoti-golden-update`` records each passing check, ``--aoti-golden``
compares the recorded package (under this torch), this torch's eager and this run's engine
with the record; a damaged record is refused before anything in it loads; records of tests
that no longer exist are listed, and deleted by an update that collected every test."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import fsspec
import pytest

# imported here, not first inside an inner session (cryptography's compiled core, once)
from pytest_aoti.fleet.signing import (
    SIGNING_KEY_ENV,
    TRUSTED_KEYS_ENV,
    generate_key_pair,
    load_trust,
)
from pytest_aoti.fleet.store import RemoteStore
from pytest_aoti.golden.lines import summary_line
from pytest_aoti.golden.records import (
    MANIFEST,
    PACKAGE,
    SCHEMA,
    VERSION,
    RecordProblem,
    folder_name,
    read_record,
    unused_records,
    validate_manifest,
    write_record,
)

SOURCE = """
import os


class TripleThenCos(torch.nn.Module):
    def forward(self, x):
        x.mul_(3)
        return x.cos()


def test_model(aoti):
    # GOLDEN_CHANGED: the model changed after its record was written
    model = TripleThenCos() if os.environ.get("GOLDEN_CHANGED") else DoubleThenCos()
    aoti.check(model, (example(),))


def test_other(aoti):
    aoti.check(DoubleThenCos(), (example() + 1,))
"""


def _manifest(**changes: object) -> dict[str, object]:
    manifest: dict[str, object] = {
        "schema": SCHEMA,
        "version": VERSION,
        "test": "t.py::test_a[cpu]",
        "label": "t.py::test_a[cpu]",
        "torch": "2.13.0",
        "machine": {},
        "files": {"inputs.pt": "0", "eager.pt": "0", "engine.pt": "0"},
        "package": {"sha256": "0", "kept": True},
        "tolerance": {},
        "outputs": ["output"],
        "mutated_inputs": [],
    }
    manifest.update(changes)
    return manifest


def test_a_folder_name_is_readable_and_distinct_per_check() -> None:
    first = folder_name("tests/test_a.py::test_b[cpu]")
    assert first.startswith("tests_test_a.py__test_b_cpu")
    assert first != folder_name("tests/test_a.py::test_b[cpu] #2")
    assert "/" not in folder_name("../../etc::x")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"schema": "other"}, "not a pytest-aoti golden manifest"),
        ({"version": 99}, "record it again with --aoti-golden-update"),
        ({"files": {"../inputs.pt": "0", "eager.pt": "0", "engine.pt": "0"}}, "plain name"),
        ({"files": {"inputs.pt": "0"}}, "'files' must name"),
        ({"outputs": "output"}, "'outputs' is missing or not a list"),
    ],
)
def test_a_manifest_of_another_kind_version_or_path_is_refused(
    changes: dict[str, object], message: str
) -> None:
    validate_manifest(_manifest())
    with pytest.raises(RecordProblem, match=message):
        validate_manifest(_manifest(**changes))


def test_a_record_rewrites_only_what_changed(tmp_path: Path) -> None:
    root = tmp_path / "golden"
    folder = root / "check"
    staged = tmp_path / "staged"
    staged.mkdir()

    def files(content: bytes) -> tuple[dict[str, Path], dict[str, str]]:
        import hashlib

        made, digests = {}, {}
        for name in ("inputs.pt", "eager.pt", "engine.pt", PACKAGE):
            path = staged / name
            path.write_bytes(content + name.encode())
            made[name] = path
            digests[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        return made, digests

    made, digests = files(b"one")
    package = {"sha256": digests.pop(PACKAGE), "kept": True}
    assert write_record(folder, _manifest(files=digests, package=package, date="d1"), made)
    record = read_record(folder)
    assert record.verified(PACKAGE).read_bytes() == b"one" + PACKAGE.encode()
    written = (folder / "eager.pt").stat().st_mtime_ns

    made, _ = files(b"one")  # the same answers on a later day: nothing is rewritten
    assert not write_record(folder, _manifest(files=digests, package=package, date="d2"), made)
    assert json.loads((folder / MANIFEST).read_text())["date"] == "d1"
    assert (folder / "eager.pt").stat().st_mtime_ns == written

    (folder / PACKAGE).write_bytes(b"damaged")
    with pytest.raises(RecordProblem, match="does not match the digest in its manifest"):
        read_record(folder).verified(PACKAGE)


def _a_package_above_the_limit_comes_from_the_fleet_store(
    run_aoti: Callable[..., pytest.RunResult],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    common: tuple[str, ...],
) -> None:
    """Above the package limit a record keeps the package's digest, path and key: on a
    machine without that path the package comes from the fleet store it was published to,
    signed, verified and checked against the record's digest."""
    large = tmp_path / "large"
    options = (*common[:-1], f"--aoti-golden={large}", "-k", "test_model")
    run_aoti(SOURCE, *options, "--aoti-golden-update", "--aoti-golden-package-limit=1")
    (folder,) = large.iterdir()
    manifest = json.loads((folder / MANIFEST).read_text())
    about = manifest["package"]
    assert not about["kept"] and not (folder / PACKAGE).exists()
    assert about["program_key"] == manifest["program_key"] and Path(about["source"]).is_file()

    # the CI machine that compiled it publishes the package; this one lacks the path
    private, public = tmp_path / "ci.pem", tmp_path / "ci.pub"
    generate_key_pair(private, public)
    shared = tmp_path / "fleet"
    fs, root = fsspec.core.url_to_fs(f"file://{shared}")
    publisher = RemoteStore(
        f"file://{shared}",
        fs,
        root,
        mode="readwrite",
        trust=load_trust(environ={SIGNING_KEY_ENV: str(private)}),
        on_problem=pytest.fail,
    )
    assert publisher.publish(about["program_key"], Path(about["source"]), {})
    about["source"] = str(tmp_path / "another-machine" / "package.pt2")
    (folder / MANIFEST).write_text(json.dumps(manifest))

    absent = run_aoti(SOURCE, *options)
    absent.assert_outcomes(failed=1)
    absent.stdout.fnmatch_lines(
        [
            "*keeps only the digest of its package: *another-machine* does not hold it and no "
            "fleet store*--aoti-cache-url*"
        ]
    )
    monkeypatch.setenv(TRUSTED_KEYS_ENV, str(public))
    fetched = run_aoti(SOURCE, *options, f"--aoti-cache-url=file://{shared}")
    fetched.assert_outcomes(passed=1)
    fetched.stdout.fnmatch_lines(["golden: 1 records (recorded under torch *); 1 packages load; *"])


def test_records_of_tests_gone_or_checks_no_longer_made_are_unused(tmp_path: Path) -> None:
    for label, test in [("a[cpu]", "a[cpu]"), ("a[cpu] #2", "a[cpu]"), ("b[cpu]", "b[cpu]")]:
        folder = tmp_path / folder_name(label)
        folder.mkdir()
        (folder / MANIFEST).write_text(json.dumps(_manifest(label=label, test=test)))
    unused = unused_records(tmp_path, {"a[cpu]": "passed"}, {"a[cpu]"})
    assert sorted(record.label for record in unused) == ["a[cpu] #2", "b[cpu]"]
    # a failed test made none of its checks to the end: its records are not unused
    assert [r.label for r in unused_records(tmp_path, {"a[cpu]": "failed"}, set())] == ["b[cpu]"]


def test_the_summary_line_counts_records_loads_and_differences() -> None:
    matched = {"status": "matched", "recorded_torch": "2.13.0", "package": "loaded"}
    line = summary_line([matched, matched, None], [None, None, {"kind": "golden"}], update=False)
    assert line == "golden: 3 records (recorded under torch 2.13.0); 2 packages load; 1 differ"
    recorded = [{"status": "recorded"}, {"status": "unchanged"}]
    assert summary_line(recorded, [], update=True) == "golden: 1 records written, 1 unchanged"


@pytest.mark.compiles
def test_record_then_check_and_what_each_kind_of_change_fails_with(
    run_aoti: Callable[..., pytest.RunResult],
    pytester: pytest.Pytester,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    golden = tmp_path / "golden"
    common = (
        "--aoti-probes=off",
        "--aoti-values=off",
        "--aoti-cpp-loader=off",
        f"--aoti-golden={golden}",
    )

    # a check without a record fails with the command that records it
    missing = run_aoti(SOURCE, *common, "-k", "test_other")
    missing.assert_outcomes(failed=1)
    missing.stdout.fnmatch_lines(
        ["*no golden record of this check in*", "*record it: pytest --aoti-golden=*update*"]
    )

    recorded = run_aoti(SOURCE, *common, "--aoti-golden-update")
    recorded.assert_outcomes(passed=2)
    recorded.stdout.fnmatch_lines(["golden: 2 records written, 0 unchanged"])
    folders = sorted(path.name for path in golden.iterdir())
    assert len(folders) == 2
    manifest = json.loads((golden / folders[1] / MANIFEST).read_text())
    assert manifest["mutated_inputs"] == ["x"] and manifest["package"]["kept"]

    report = tmp_path / "checked.json"
    checked = run_aoti(SOURCE, *common, f"--aoti-report={report}")
    checked.assert_outcomes(passed=2)
    fields = [record["golden"] for record in json.loads(report.read_text())["checks"]]
    # the same torch build and machine: the recorded package answers bit for bit
    assert [(f["status"], f["bit_for_bit"]) for f in fields] == [("matched", True)] * 2
    assert all(f["max_abs"]["package"] == 0.0 for f in fields)
    checked.stdout.fnmatch_lines(
        ["golden: 2 records (recorded under torch *); 2 packages load; 0 differ"]
    )

    # the packages alone, no model code: a folder without test files
    serving = tmp_path / "serving"
    serving.mkdir()
    monkeypatch.chdir(serving)
    packages = pytester.runpytest(
        "--aoti-device=cpu", f"--aoti-model=golden:{golden}", "-v", "-p", "no:cacheprovider"
    )
    packages.assert_outcomes(passed=2)
    packages.stdout.fnmatch_lines(["*aoti-model::test_model?golden:test_inner.py__test_*PASSED*"])
    monkeypatch.chdir(pytester.path)

    _a_package_above_the_limit_comes_from_the_fleet_store(run_aoti, tmp_path, monkeypatch, common)

    # the model changed after recording: eager and the engine both answer otherwise
    monkeypatch.setenv("GOLDEN_CHANGED", "1")
    changed = run_aoti(SOURCE, *common, "-k", "test_model")
    monkeypatch.delenv("GOLDEN_CHANGED")
    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines(
        [
            "E * this torch's eager and this run's engine answer output otherwise than "
            "recorded: the model changed since the record*",
            "E *golden record test_inner.py__test_model_cpu-* (recorded under torch *, "
            "checked under torch *)*",
        ]
    )

    # altered package bytes are refused before any load
    record = next(golden / name for name in folders if "test_other" in name)
    package = record / PACKAGE
    data = bytearray(package.read_bytes())
    data[len(data) // 2] ^= 0xFF
    package.write_bytes(bytes(data))
    damaged = run_aoti(SOURCE, *common, "-k", "test_other")
    damaged.assert_outcomes(failed=1)
    damaged.stdout.fnmatch_lines(["*does not match the digest in its manifest*damaged*"])

    # a record whose test is gone: listed; deleted by an update that ran every test
    only_model = SOURCE.split("def test_other")[0]
    listed = run_aoti(only_model, *common)
    listed.stdout.fnmatch_lines(
        ["golden: 1 unused records (--aoti-golden-update deletes them after a full run)"]
    )
    narrowed = run_aoti(only_model, *common, "--aoti-golden-update", "-k", "model")
    assert "unused records" not in narrowed.stdout.str()
    assert record.is_dir(), "-k narrows the run: nothing is deleted"
    run_aoti(only_model, *common, "--aoti-golden-update").stdout.fnmatch_lines(
        ["golden: 1 unused records deleted", f"  {record.name}: *test_other*"]
    )
    assert not record.exists()
