"""A new feature touches its own folder and the feature list, nothing else.

The test copies the package, adds a toy feature to the copy the way a contributor would
(a folder with its declaration, its check and its hooks; three lines in ``features.py``),
checks that no other file of the copy differs from the package, and runs a pytest
session on the copy: the toy's option is in ``--help`` and takes a marker keyword, its
check runs inside ``aoti.check``, its record field is in every JSON record and its line is
in the terminal summary. The toy check fails at the eager phase, so nothing is compiled.
"""

from __future__ import annotations

import filecmp
import json
import shutil
import textwrap
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "pytest_aoti"

TOY_FILES = {
    "__init__.py": '"""A toy feature: one option, one check, one record field, one line."""\n',
    "feature.py": """
        from dataclasses import dataclass

        from pytest_aoti.options.feature import Feature
        from pytest_aoti.options.fields import per_check
        from pytest_aoti.options.values import check_count, parse_positive_int


        @dataclass(frozen=True)
        class ToyOptions:
            toy_level: int = per_check(
                1,
                "The toy feature's level. Default: 1.",
                parse=parse_positive_int,
                check=check_count,
                marker=True,
            )


        def toy_properties(fields):
            return [("aoti_toy_seen", fields["toy_seen"])] if fields.get("toy_seen") else []


        TOY = Feature(
            "toy",
            "A toy: fails a check whose level is over 2",
            options=ToyOptions,
            record_fields={"toy_seen": 0},
            properties=toy_properties,
            plugin="pytest_aoti.toy.plugin",
        )
    """,
    "plugin.py": """
        def pytest_aoti_checks():
            from pytest_aoti.toy.check import ToyCheck

            return [ToyCheck()]


        def pytest_aoti_terminal_summary(terminalreporter, records):
            seen = [record.other_fields["toy_seen"] for record in records]
            terminalreporter.write_line(f"aoti toy: {len(seen)} check(s), levels {seen}")
    """,
    "check.py": """
        from dataclasses import replace

        from pytest_aoti.errors import AotiCheckError
        from pytest_aoti.findings import FindingKind, plain_finding


        class ToyCheck:
            name, phase = "toy", "eager"

            def applies(self, plan, context):
                return True

            def run(self, plan, context):
                level = plan.options.toy_level
                finding = plain_finding(FindingKind.CHECK, f"toy level {level} is over 2")
                raise AotiCheckError(replace(finding, record_fields={"toy_seen": level}))
    """,
}

FEATURE_LIST_EDITS = (
    (
        "from pytest_aoti.triage.feature import",
        "from pytest_aoti.toy.feature import TOY, ToyOptions\nfrom pytest_aoti.triage.feature import",
    ),
    (
        "FEATURES: tuple[Feature, ...] = (GENERATED, VALUES, TRIAGE, PROBES, MODELS",
        "FEATURES: tuple[Feature, ...] = (GENERATED, VALUES, TRIAGE, PROBES, MODELS, TOY",
    ),
    ("class CheckOptions(ProbeOptions,", "class CheckOptions(ToyOptions, ProbeOptions,"),
)

TEST_FILE = """
import pytest
import torch


@pytest.mark.aoti(toy_level=3)
def test_toy(aoti):
    aoti.check(torch.nn.ReLU(), (torch.ones(2),))
"""


def _with_toy(root: Path) -> Path:
    """A copy of the package under ``root`` with the toy feature added; the copy's path."""
    copy = root / "pytest_aoti"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "toy").mkdir()
    for name, text in TOY_FILES.items():
        (copy / "toy" / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    feature_list = copy / "features.py"
    source = feature_list.read_text(encoding="utf-8")
    for old, new in FEATURE_LIST_EDITS:
        assert source.count(old) == 1, f"the feature list no longer has {old!r}"
        source = source.replace(old, new)
    feature_list.write_text(source, encoding="utf-8")
    return copy


def _changed(left: Path, right: Path) -> set[str]:
    """Files of ``right`` that are new or differ from ``left``'s, relative to ``right``."""
    changed = set()
    for path in right.rglob("*.py"):
        relative = path.relative_to(right)
        original = left / relative
        if not original.exists() or not filecmp.cmp(original, path, shallow=False):
            changed.add(relative.as_posix())
    return changed


def test_a_new_feature_touches_only_its_folder_and_the_feature_list(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = _with_toy(pytester.path / "copy")
    assert _changed(PACKAGE_DIR, copy) == {
        "features.py",
        *(f"toy/{name}" for name in TOY_FILES),
    }
    monkeypatch.setenv("PYTHONPATH", str(copy.parent))
    pytester.makepyfile(test_toy=TEST_FILE)

    shown = pytester.runpytest_subprocess("--help")
    shown.stdout.fnmatch_lines(
        ["*--aoti-toy-level=TOY_LEVEL", "*The toy feature's level. Default: 1."]
    )

    report = pytester.path / "report.json"
    result = pytester.runpytest_subprocess(
        "--aoti-device=cpu", f"--aoti-report={report}", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*AotiCheckError: toy level 3 is over 2*"])
    result.stdout.fnmatch_lines(["aoti toy: 1 check(s), levels [3]"])
    (record,) = json.loads(report.read_text(encoding="utf-8"))["checks"]
    assert record["toy_seen"] == 3
    assert record["probes"] == [], "every feature's record fields are in every record"
