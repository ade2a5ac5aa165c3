"""``--aoti-model=golden:DIR``: every golden record in DIR as a test of its package alone, no
model code: the recorded package loaded under this torch (in the engine child) answers the
recorded inputs as recorded. What a serving team with only packages runs before it upgrades
its runtime."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_aoti.golden.package import PackageAbsent
from pytest_aoti.golden.records import GoldenRecord, RecordProblem, read_record, records_in

if TYPE_CHECKING:
    from pytest_aoti.golden.feature import GOLDEN_KIND
from pytest_aoti.api import AotiTester

PREFIX = "golden:"


def resolve_golden(
    text: str, rootpath: Path, config: pytest.Config | None = None
) -> list[tuple[str, Any]]:
    """One test per record folder in the spec's DIR (relative to the rootdir), as
    ``(test id, test)``; a usage error where DIR holds none."""
    root = Path(text.removeprefix(PREFIX))
    root = root if root.is_absolute() else rootpath / root
    folders: list[Path] = [
        found.folder if isinstance(found, GoldenRecord) else found[0] for found in records_in(root)
    ]
    if not folders:
        raise pytest.UsageError(
            f"--aoti-model={text}: no golden records in {root} (record them with "
            "--aoti-golden=DIR --aoti-golden-update)"
        )
    return [(f"{PREFIX}{folder.name}", _RecordTest(folder, config)) for folder in folders]


class _RecordTest:
    """The test of one record: its package against its recorded engine's answers."""

    def __init__(self, folder: Path, config: pytest.Config | None = None) -> None:
        self.folder = folder
        self.config = config
        """The run's: its fleet store holds the packages records keep outside themselves."""

    def __call__(self, aoti: AotiTester) -> None:
        __tracebackhide__ = True
        import torch

        from pytest_aoti.api import AotiCheckError, Finding
        from pytest_aoti.golden.check import (
            differences,
            fleet_store,
            load_tensors,
            package_answer,
            package_refused,
            same_build,
        )

        try:
            record = read_record(self.folder)
            device = torch.device(str(record.manifest.get("device", "cpu")))
            if device.type != aoti.device.type:
                pytest.skip(f"recorded on {device}, this test runs on {aoti.device}")
            flat = load_tensors(record, "inputs.pt").get("flat") or []
            answer = package_answer(
                record,
                [leaf for leaf in flat if isinstance(leaf, torch.Tensor)],
                aoti.device,
                fleet=fleet_store(self.config) if self.config is not None else None,
            )
        except PackageAbsent as absent:
            pytest.skip(str(absent))
        except RecordProblem as problem:
            raise AotiCheckError(
                Finding.plain(GOLDEN_KIND, f"golden record unusable: {problem}")
            ) from None
        where = (
            f"golden record {self.folder.name} of {record.label} "
            f"(recorded under torch {record.manifest['torch']}, checked under torch "
            f"{torch.__version__})"
        )
        if isinstance(answer, str):
            raise package_refused(answer, where)
        recorded = load_tensors(record, "engine.pt")
        exact = same_build(record, aoti.device)
        try:
            differences(answer, recorded, record, exact=exact)
        except AotiCheckError as difference:
            raise AotiCheckError(
                Finding.plain(
                    GOLDEN_KIND,
                    "the recorded package (loaded under this torch) answers "
                    f"{difference.finding.location or 'an output'} otherwise than recorded: "
                    f"{difference.finding.message}\n{where}",
                    location=difference.finding.location,
                )
            ) from None


def spec_prefixes(config: pytest.Config | None = None) -> dict[str, Any]:
    """The model-spec prefix this plugin adds (``golden:``) and its resolver."""

    def resolve(text: str, rootpath: Path) -> list[tuple[str, Any]]:
        return resolve_golden(text, rootpath, config)

    return {PREFIX: resolve}
