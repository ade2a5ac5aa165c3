"""Finding kinds are strings of one type, :class:`FindingKind`: the core declares its own,
each feature declares the kinds it finds with its ``Feature``, and every kind a check of the
package makes is declared by the core or by the feature whose folder makes it."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest_aoti
from pytest_aoti.findings import (
    CORE_KINDS,
    PARITY_KINDS,
    REPRODUCIBLE_KINDS,
    Finding,
    FindingKind,
)
from pytest_aoti.plugins import DEFAULT_PLUGINS, default_features

PACKAGE = Path(pytest_aoti.__file__).parent


def test_a_kind_is_its_string_everywhere() -> None:
    assert FindingKind.BUFFER == "buffer"
    assert f"{FindingKind.MUTATED_INPUT}" == str(FindingKind.MUTATED_INPUT) == "mutated input"
    assert json.dumps({"kind": FindingKind.IN_PLACE}) == '{"kind": "in-place"}'
    assert FindingKind.OUTPUT.value == "output" and type(FindingKind.OUTPUT.value) is str


def test_a_finding_takes_a_string_kind_as_the_kind_it_names() -> None:
    finding = Finding(kind="buffer", location="buffer 'calls'", summary="")  # type: ignore[arg-type]
    assert isinstance(finding.kind, FindingKind) and finding.kind == FindingKind.BUFFER
    assert finding.to_json()["kind"] == "buffer"
    assert Finding.plain("threads", "differs").kind == "threads"


def test_the_kind_sets_hold_core_kinds() -> None:
    assert FindingKind.BUFFER in REPRODUCIBLE_KINDS and FindingKind.BUFFER not in PARITY_KINDS
    assert "output" in PARITY_KINDS  # a str compares with its kind
    assert PARITY_KINDS | REPRODUCIBLE_KINDS <= set(CORE_KINDS)


def test_each_kind_is_declared_once_by_the_core_or_one_feature() -> None:
    owners: dict[str, str] = {kind: "core" for kind in CORE_KINDS}
    for feature in default_features():
        assert feature.kinds or feature.bundle is None
        for kind, meaning in feature.kinds.items():
            assert kind not in owners, f"{feature.name} declares {kind!r}, as {owners[kind]} does"
            assert isinstance(kind, FindingKind) and meaning
            owners[kind] = feature.name
    assert {owners[k] for k in ("shape", "probe", "weights", "golden")} == {
        "generated",
        "probes",
        "weights",
        "golden",
    }


def _kinds_made(path: Path) -> set[str]:
    """The kinds a module makes: ``FindingKind("name")`` and ``FindingKind.NAME``."""
    made: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "FindingKind"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            made.add(str(node.args[0].value))
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "FindingKind"
            and node.attr.isupper()
        ):
            made.add(getattr(FindingKind, node.attr))
    return made


def test_a_feature_folder_makes_only_the_core_kinds_and_its_own() -> None:
    folders = {module.split(".")[1]: name for name, module in DEFAULT_PLUGINS.items()}
    own = {f"aoti-{f.name}": set(f.kinds) for f in default_features()}
    for path in sorted(PACKAGE.rglob("*.py")):
        folder = path.relative_to(PACKAGE).parts[0]
        allowed = set(CORE_KINDS) | own.get(folders.get(folder, ""), set())
        if path.name == "findings.py":
            continue  # where the core's kinds are made
        assert _kinds_made(path) <= allowed, path
