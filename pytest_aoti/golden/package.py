"""Where a record's package is: in the record (its bytes checked against the manifest), or,
above the package limit, at the path it was written to or in the fleet store under its
program key (signed and verified by the store, then checked against the manifest)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from pytest_aoti.golden.feature import UPDATE_FLAG
from pytest_aoti.golden.records import PACKAGE, GoldenRecord, RecordProblem, file_digest


class PackageAbsent(RecordProblem):
    """A record that keeps only its package's digest, whose package is neither where it
    said nor in the fleet store."""


class FleetStore(Protocol):
    """What the golden check asks of the fleet store (the ``--aoti-cache-url`` store)."""

    def fetch(self, key: str, destination: Path) -> object | None:
        """Download and verify ``key``'s package to ``destination``; None where it cannot."""


@contextlib.contextmanager
def recorded_package(record: GoldenRecord, fleet: FleetStore | None = None) -> Iterator[Path]:
    """The record's package, once its bytes matched the manifest (damage is refused before
    any load). A package kept outside the record is taken from where it was written, else
    fetched from ``fleet`` by its program key into a folder removed afterwards."""
    if record.package_kept:
        yield record.verified(PACKAGE)
        return
    about = record.manifest["package"]
    digest = about["sha256"]
    source = Path(str(about.get("source", "")))
    if source.is_file() and file_digest(source) == digest:
        yield source
        return
    key = str(about.get("program_key") or "")
    if fleet is not None and key:
        scratch = Path(tempfile.mkdtemp(prefix="pytest-aoti-golden-"))
        try:
            fetched = scratch / PACKAGE
            if fleet.fetch(key, fetched) is not None:
                if file_digest(fetched) != digest:
                    raise PackageAbsent(
                        f"golden record {record.folder.name}: the fleet store's package of "
                        f"key {key[:12]} does not match the record's digest (record it again "
                        f"with {UPDATE_FLAG})"
                    )
                yield fetched
                return
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    store = "the fleet store does not hold it" if fleet is not None else "no fleet store"
    raise PackageAbsent(
        f"golden record {record.folder.name} keeps only the digest of its package: "
        f"{source} does not hold it and {store} (key {key[:12]}): fetch the package "
        f"there, set --aoti-cache-url to the store it was published to, or record again "
        f"with {UPDATE_FLAG}"
    )
