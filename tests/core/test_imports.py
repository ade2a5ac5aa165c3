"""The import contracts (``[tool.importlinter]`` in pyproject.toml, checked by import-linter)
held to the package, and the limits on a module's size.

import-linter reads every import, wherever it is written: at the top of a module, inside a
function (the lazy imports that keep torch out of plugin loading) and under
``TYPE_CHECKING``. A module may import modules on its own floor or below, never above; no
folder's modules import one another in a circle; a feature plugin imports the API and its
own folder alone. docs/how-it-is-built.md describes the same floors.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_aoti.plugins import DEFAULT_PLUGINS

PACKAGE = "pytest_aoti"
PACKAGE_DIR = Path(__file__).resolve().parents[2] / PACKAGE
ROOT = PACKAGE_DIR.parent
LINT_IMPORTS = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def module_name(path: Path) -> str:
    """``checks.parity`` for ``pytest_aoti/checks/parity.py``; ``""`` for the package."""
    parts = list(path.relative_to(PACKAGE_DIR).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


def describe(module: str) -> str:
    return PACKAGE + (f".{module}" if module else "")


def feature_folders() -> set[str]:
    """The folders of the default plugins (``pytest_aoti.values.plugin``: ``values``)."""
    return {module.split(".")[1] for module in DEFAULT_PLUGINS.values()}


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the package and the contracts under ``root``."""
    return subprocess.run(
        [sys.executable, "-c", LINT_IMPORTS, "--no-cache"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )


def contracts() -> dict[str, dict[str, Any]]:
    """The contracts of pyproject.toml, by id."""
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {contract["id"]: contract for contract in config["tool"]["importlinter"]["contracts"]}


def test_the_import_contracts_hold() -> None:
    linted = lint_imports(ROOT)
    assert linted.returncode == 0, linted.stdout + linted.stderr
    assert f"{len(contracts())} kept, 0 broken" in linted.stdout


def layer_names(layer: str) -> list[str]:
    separator = "|" if "|" in layer else ":"
    return [name.strip() for name in layer.split(separator)]


def test_the_contracts_name_every_feature_and_the_core_below_the_api() -> None:
    """A new feature folder is declared as one: its own independent sibling above the API,
    held to the API alone, and out of reach of the entry point's modules."""
    by_id = contracts()
    layers = [layer_names(layer) for layer in by_id["floors"]["layers"]]
    features = {f"{PACKAGE}.{folder}" for folder in feature_folders()}
    assert "|" in by_id["floors"]["layers"][1]
    assert {f"{PACKAGE}.{name}" for name in layers[1]} == features
    assert layers[2] == ["api"]
    below_api = {f"{PACKAGE}.{name}" for layer in layers[3:] for name in layer}
    on_the_api = by_id["features-on-the-api"]
    assert set(on_the_api["source_modules"]) == features
    assert set(on_the_api["forbidden_modules"]) == below_api
    assert set(by_id["features-through-pytest"]["forbidden_modules"]) == features


MUTATIONS = {
    "a deferred import up the floors": (
        "options/catalog.py",
        "def _read_plugins():\n    from pytest_aoti.plugins import DEFAULT_PLUGINS\n",
        "pytest_aoti.options.catalog -> pytest_aoti.plugins",
    ),
    "a TYPE_CHECKING import up the floors": (
        "trees.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from pytest_aoti.compiling.program import AotiProgram\n",
        "pytest_aoti.trees -> pytest_aoti.compiling.program",
    ),
    "a circle inside a folder": (
        "checks/state.py",
        "from pytest_aoti.checks import parity\n",
        "No cycles are allowed in pytest_aoti.checks",
    ),
    "a feature importing the core beside the API": (
        "values/check.py",
        "from pytest_aoti.trees import clone_tree\n",
        "pytest_aoti.values.check -> pytest_aoti.trees",
    ),
    "a feature importing another": (
        "golden/records.py",
        "from pytest_aoti.weights import feature\n",
        "pytest_aoti.golden.records -> pytest_aoti.weights.feature",
    ),
    "the entry point importing a feature": (
        "plugin.py",
        "from pytest_aoti.probes import feature\n",
        "pytest_aoti.plugin -> pytest_aoti.probes.feature",
    ),
}


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_a_broken_rule_is_caught(mutation: str, tmp_path: Path) -> None:
    """The contracts fail on a copy of the package with one import each rule forbids."""
    module, added, reported = MUTATIONS[mutation]
    shutil.copytree(PACKAGE_DIR, tmp_path / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with open(tmp_path / PACKAGE / module, "a", encoding="utf-8") as source:
        source.write("\n" + added)
    linted = lint_imports(tmp_path)
    assert linted.returncode == 1, linted.stdout + linted.stderr
    assert reported in linted.stdout.replace("\n", " ")


def test_every_import_of_the_package_is_one_the_contracts_see() -> None:
    """import-linter reads import statements: no module loads a module of the package by
    ``importlib.import_module`` or ``__import__`` of a literal name instead."""
    found = []
    for name, path in package_modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and _dynamic_import(node.func)
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and str(node.args[0].value).startswith(PACKAGE)
            ):
                found.append(f"{describe(name)} line {node.lineno}")
    assert not found, f"import these by an import statement: {found}"


def _dynamic_import(function: ast.expr) -> bool:
    """``importlib.import_module(...)``, ``import_module(...)`` or ``__import__(...)``."""
    if isinstance(function, ast.Attribute):
        return function.attr == "import_module"
    return isinstance(function, ast.Name) and function.id in ("import_module", "__import__")


MAX_MODULE_LINES = 600
"""A module longer than this does more than one job: split it by job."""

KNOWN_LONG: dict[str, str] = {
    "triage.repro_script": (
        "no split: it is the repro bundle's repro.py, one file that runs alone (`python -I "
        "repro.py` imports no module beside it); its parts are sections, each function under "
        "80 lines"
    ),
}
"""Modules over the limit today, each with what splits it. An entry whose module is back
under the limit fails the test, so that the list only shrinks."""


def module_lines() -> dict[str, int]:
    return {
        module: len(path.read_text(encoding="utf-8").splitlines())
        for module, path in package_modules().items()
    }


def test_no_module_is_over_the_line_limit() -> None:
    long = {
        module: lines
        for module, lines in module_lines().items()
        if lines > MAX_MODULE_LINES and module not in KNOWN_LONG
    }
    assert not long, (
        f"modules over {MAX_MODULE_LINES} lines: "
        + ", ".join(f"{describe(name)} ({lines})" for name, lines in sorted(long.items()))
        + "; split each by job"
    )


def test_known_long_modules_are_still_long() -> None:
    lines = module_lines()
    short = [describe(m) for m in KNOWN_LONG if lines.get(m, 0) <= MAX_MODULE_LINES]
    assert not short, f"remove from KNOWN_LONG in tests/core/test_imports.py: {', '.join(short)}"


def parts_table_files(text: str) -> set[str]:
    """The module paths the "The parts" table of docs/how-it-is-built.md names, relative to
    the package: ``checks/parity.py``; a folder's row names its files bare, and names the
    files of a subfolder in parentheses after it (``probes/`` (``check.py``, ...)); "the top-level ``x.py``" is outside the folder."""
    import re

    section = text.split("## The parts", 1)[1].split("\n## ", 1)[0]
    files: set[str] = set()
    for row in section.splitlines():
        cells = [cell.strip() for cell in row.split("|")]
        if len(cells) < 4 or not cells[2].startswith("`"):
            continue
        folder = cells[1].strip("`") if cells[1].startswith("`") else ""
        sub = ""
        for match in re.finditer(r"`([^`]+)`|\)", cells[2]):
            token = match.group(1) or ""
            if not token:
                sub = ""
            elif token.endswith("/"):
                sub = token
            elif token.endswith(".py"):
                top_level = cells[2][: match.start()].endswith("top-level ")
                files.add(f"{'' if top_level else folder}{sub}{token}")
    return files


def test_the_parts_table_names_every_module_and_only_real_ones() -> None:
    text = (PACKAGE_DIR.parent / "docs" / "how-it-is-built.md").read_text(encoding="utf-8")
    named = parts_table_files(text)
    modules = {
        path.relative_to(PACKAGE_DIR).as_posix()
        for path in PACKAGE_DIR.rglob("*.py")
        if path.name != "__init__.py"
    }
    assert named - modules == set(), "the page names modules that do not exist"
    assert modules - named == set(), "modules missing from the page's parts table"


MAX_FUNCTION_LINES = 80
"""A function longer than this, counted from ``def`` to its last line, does more than one
thing: split it."""

MAX_STRING_LINES = 40
"""A string literal longer than this (a docstring aside) is a file in disguise, out of sight
of lint and types: make it a module or a data file."""


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of ``tree``'s module, classes and functions."""
    found: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            assert isinstance(body, list)
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
        # attribute docstrings: a string statement right after an assignment
        if isinstance(body, list):
            for before, after in zip(body, body[1:]):
                if isinstance(before, (ast.Assign, ast.AnnAssign)) and isinstance(after, ast.Expr):
                    found.add(id(after.value))
    return found


def test_no_function_or_string_literal_is_over_its_limit() -> None:
    long_functions, long_strings = [], []
    for name, path in package_modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long_functions.append(f"{describe(name)}:{node.name} ({lines})")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_STRING_LINES and id(node) not in docstrings:
                    long_strings.append(f"{describe(name)} line {node.lineno} ({lines})")
    assert not long_functions, f"functions over {MAX_FUNCTION_LINES} lines: {long_functions}"
    assert not long_strings, f"string literals over {MAX_STRING_LINES} lines: {long_strings}"


# --------------------------------------------------------------------------- the features


def test_every_default_plugin_is_a_folder_that_declares_its_feature_through_its_hook() -> None:
    from pytest_aoti.plugins import DEFAULT_PLUGINS, default_features

    modules = package_modules()
    declared = {feature.plugin_name: feature for feature in default_features()}
    for name, module in DEFAULT_PLUGINS.items():
        folder = module.split(".")[1]
        assert module == f"{PACKAGE}.{folder}.plugin" and f"{folder}.plugin" in modules
        feature = declared.get(name)
        if feature is None:
            continue  # a plugin of checks alone (timing)
        assert all(
            cls.__module__.startswith(f"{PACKAGE}.{folder}.")
            for cls in (feature.options, feature.settings)
            if cls
        ), f"{name} declares its options in its own folder"
