"""Golden records on disk: one folder per check (its test id and index), a manifest and the
tensors of one passing check, and the package it compiled. No torch at import.

A record's folder holds ``manifest.json``, ``inputs.pt`` (the example's flat inputs),
``eager.pt`` and ``engine.pt`` (each side's flat outputs and the inputs the program mutates,
after one call from the exported state) and ``package.pt2`` (or, above the size limit, only
its digest and where it can be fetched from, in the manifest). The manifest says what every
file's digest is: a file whose bytes differ is damaged, and nothing in it is loaded.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_aoti.api import replace_text

SCHEMA = "pytest-aoti-golden"
"""The manifest's ``schema``: what kind of file it is."""
VERSION = 1
"""The manifest's ``version``: a record of another version is refused with what to do."""
MANIFEST = "manifest.json"
TENSOR_FILES = ("inputs.pt", "eager.pt", "engine.pt")
PACKAGE = "package.pt2"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.+-]+")
_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "schema": str,
    "version": int,
    "test": str,
    "label": str,
    "torch": str,
    "machine": dict,
    "files": dict,
    "package": dict,
    "tolerance": dict,
    "outputs": list,
    "mutated_inputs": list,
}


class RecordProblem(Exception):
    """A record that cannot be used: damaged, of another version, or pointing outside its folder."""


def folder_name(label: str) -> str:
    """The record folder of check ``label`` (``tests/test_a.py::test_b[cpu] #2``): readable,
    and distinct for distinct labels (a digest of the label ends it)."""
    readable = _UNSAFE.sub("_", label.replace("::", "__").replace("/", "_")).strip("_.")[:80]
    digest = hashlib.sha256(label.encode()).hexdigest()[:10]
    return f"{readable or 'check'}-{digest}"


def file_digest(path: Path) -> str:
    """The sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class GoldenRecord:
    """One record's folder and its validated manifest."""

    folder: Path
    manifest: Mapping[str, Any]

    @property
    def label(self) -> str:
        return str(self.manifest["label"])

    @property
    def test(self) -> str:
        return str(self.manifest["test"])

    def path_of(self, name: str) -> Path:
        """A file the manifest names, which must lie in the record's folder."""
        path = (self.folder / name).resolve()
        if path.parent != self.folder.resolve():
            raise RecordProblem(f"{self.folder}: the manifest names {name!r}, outside the record")
        return path

    def verified(self, name: str) -> Path:
        """``name`` after its bytes matched the manifest's digest (damage is refused)."""
        path = self.path_of(name)
        if name == PACKAGE:
            expected = self.manifest["package"].get("sha256")
        else:
            expected = self.manifest["files"].get(name)
        if not path.is_file():
            raise RecordProblem(f"{path} is missing from the golden record")
        if not isinstance(expected, str) or file_digest(path) != expected:
            raise RecordProblem(
                f"{path} does not match the digest in its manifest: the record is damaged "
                "(restore it from version control, or record it again with --aoti-golden-update)"
            )
        return path

    @property
    def package_kept(self) -> bool:
        """Whether the record holds the package itself (else only its digest)."""
        return bool(self.manifest["package"].get("kept"))


def read_record(folder: Path) -> GoldenRecord:
    """The record in ``folder``, its manifest validated; raises :class:`RecordProblem`."""
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise RecordProblem(f"{path} cannot be read: {error}") from None
    validate_manifest(manifest, path)
    return GoldenRecord(folder, manifest)


def validate_manifest(manifest: Any, where: Path | str = "manifest") -> None:
    """Raise :class:`RecordProblem` unless ``manifest`` is a golden manifest of this version
    whose file names stay inside its folder."""
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise RecordProblem(f"{where} is not a pytest-aoti golden manifest")
    if manifest.get("version") != VERSION:
        raise RecordProblem(
            f"{where} is a golden record of version {manifest.get('version')!r}; this "
            f"pytest-aoti reads version {VERSION}: record it again with --aoti-golden-update"
        )
    for key, kind in _REQUIRED.items():
        if not isinstance(manifest.get(key), kind):
            raise RecordProblem(f"{where}: {key!r} is missing or not a {_name(kind)}")
    names = [*manifest["files"], PACKAGE]
    for name in names:
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            raise RecordProblem(f"{where}: the file {name!r} is not a plain name in the record")
    if set(manifest["files"]) != set(TENSOR_FILES):
        raise RecordProblem(f"{where}: 'files' must name {', '.join(TENSOR_FILES)}")


def _name(kind: type | tuple[type, ...]) -> str:
    return kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)


def records_in(root: Path) -> Iterator[GoldenRecord | tuple[Path, RecordProblem]]:
    """Every record folder under ``root`` (sorted), or the folder and why it is unusable."""
    if not root.is_dir():
        return
    for folder in sorted(path for path in root.iterdir() if path.is_dir()):
        if not (folder / MANIFEST).exists():
            continue
        try:
            yield read_record(folder)
        except RecordProblem as problem:
            yield folder, problem


def write_record(folder: Path, manifest: Mapping[str, Any], files: Mapping[str, Path]) -> bool:
    """Write a record: ``files`` (name -> a written file) moved in, then the manifest. Only
    what changed is rewritten: an unchanged file (same digest) is left as it is, and a record
    whose manifest would differ only by its date is left whole. Whether anything changed."""
    validate_manifest(dict(manifest), folder / MANIFEST)
    folder.mkdir(parents=True, exist_ok=True)
    old_path = folder / MANIFEST
    old: dict[str, Any] | None = None
    if old_path.is_file():
        try:
            old = json.loads(old_path.read_text(encoding="utf-8"))
        except ValueError:
            old = None
    if old is not None and _same_but_date(old, manifest) and _files_intact(folder, old):
        for source in files.values():
            source.unlink(missing_ok=True)
        return False
    for name, source in files.items():
        target = folder / name
        # the manifest holds each new file's digest: only the one in place is read again
        expected = manifest["package"]["sha256"] if name == PACKAGE else manifest["files"][name]
        if target.is_file() and file_digest(target) == expected:
            source.unlink()
            continue
        shutil.move(str(source), str(target))
    if not manifest["package"].get("kept"):
        (folder / PACKAGE).unlink(missing_ok=True)
    replace_text(old_path, json.dumps(dict(manifest), indent=2, sort_keys=True) + "\n")
    return True


def _same_but_date(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    def undated(manifest: Mapping[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in manifest.items() if key != "date"}

    return undated(old) == undated(json.loads(json.dumps(dict(new))))


def _files_intact(folder: Path, manifest: Mapping[str, Any]) -> bool:
    try:
        record = GoldenRecord(folder, manifest)
        for name in TENSOR_FILES:
            record.verified(name)
        if record.package_kept:
            record.verified(PACKAGE)
    except (RecordProblem, KeyError, AttributeError):
        return False
    return True


def unused_records(
    root: Path, reported: Mapping[str, str], checked: set[str]
) -> list[GoldenRecord]:
    """The records whose test no longer exists (not among the ``reported`` test ids, test
    id -> outcome, of a run that collected every test), or whose test passed without making
    that check (its label not in ``checked``)."""
    unused = []
    for found in records_in(root):
        if not isinstance(found, GoldenRecord):
            continue
        outcome = reported.get(found.test)
        if outcome is None or (outcome == "passed" and found.label not in checked):
            unused.append(found)
    return unused
