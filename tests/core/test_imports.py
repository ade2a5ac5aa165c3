"""The import contract: which part of pytest_aoti may import which, checked on the source.

Every import counts, wherever it is written: at the top of a module, inside a function
(the lazy imports that keep torch out of plugin loading) and under ``TYPE_CHECKING``. A
module may import modules on its own floor or below, never above, and no chain of imports
may lead back to where it started. The floors are the parts of the package, by folder:
a new module in ``checks/`` or ``reports/`` gets its folder's floor without an edit here.
docs/how-it-is-built.md describes the same floors.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pytest_aoti.plugins import DEFAULT_PLUGINS

PACKAGE = "pytest_aoti"
PACKAGE_DIR = Path(__file__).resolve().parents[2] / PACKAGE

FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # data and helpers every part uses: which code is the user's, pytree clones,
    # findings, errors, the known torch bugs, the one atomic text write, pluggy's calls in the
    # default plugins' order; the repro bundle's
    # script (torch and the standard library only), whose assert_close defaults and AOTI
    # runner tolerance and compiling/engine_state import
    (
        "base",
        (
            "frames",
            "trees",
            "findings",
            "errors",
            "torch_bugs",
            "atomic_files",
            "folder_names",
            "hook_order",
        ),
    ),
    # rules and tables shared by all: judging numbers (tolerances and figures; the trees),
    # devices, the options (values, rows, typed per-check options, the catalog of a run's
    # options, settings, the resolver), an exported program's mutation maps and user inputs
    ("rules", ("tolerance", "compare", "devices", "options", "mutation_maps")),
    # dynamic shapes, and their public Hypothesis strategies
    ("shapes", ("shapes", "strategies")),
    # the torch boundary: export, decompose, compile, load, explain torch's errors, guards,
    # op classes, the engine read-back runner, the host's compile target, the custom ops a
    # package calls; engine calls in a child process (isolation)
    ("compiling", ("compiling", "isolation")),
    # the artifact cache: content key, local store, registry
    ("cache", ("cache",)),
    # one module per check; the decode loop's chain and its check
    ("checks", ("checks", "steps")),
    # records and every view of them
    ("reports", ("reports",)),
    # one call from eager to result: resolved into its frozen plan, its checks run phase by
    # phase, the runner that owns it around the export and the compile
    ("run", ("run",)),
    # session state, the hooks' extension points, the list of default plugins (outside a
    # run: their manager, options and checks), and the `aoti` fixture's object: a thin front
    # on the runner, which a test may also make without the fixture
    ("session", ("session", "hookspecs", "plugins", "tester")),
    # the public API a check or feature plugin imports
    ("api", ("api",)),
    # the feature plugins, each a folder on the API (see test_features_import_the_api_alone):
    # the folders of DEFAULT_PLUGINS
    ("features", tuple(module.split(".")[1] for module in DEFAULT_PLUGINS.values())),
    # pytest's entry point and the package's public names ("" is pytest_aoti itself);
    # __main__: the commands outside a pytest run, added by plugins
    ("plugin", ("plugin", "", "__main__")),
)
"""Floors from the bottom up, each with the top-level names (folders or modules) on it."""

MODULE_FLOORS: dict[str, str] = {}
"""Modules whose floor is not their folder's."""

KNOWN_UPWARD: dict[tuple[str, str], str] = {}
"""Imports that point up today, each with what replaces it. An entry whose import is gone
fails the test, so that the list only shrinks."""


def module_name(path: Path) -> str:
    """``checks.parity`` for ``pytest_aoti/checks/parity.py``; ``""`` for the package."""
    parts = list(path.relative_to(PACKAGE_DIR).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


def imported_names(source: str, module: str, is_package: bool) -> list[tuple[str, int]]:
    """Every ``pytest_aoti`` name ``source`` imports, relative to the package, with its line:
    module-level, deferred (inside functions) and ``TYPE_CHECKING`` imports alike, and
    ``importlib.import_module`` of a literal name."""
    found: list[tuple[str, int]] = []
    here = [PACKAGE, *module.split(".")] if module else [PACKAGE]
    if not is_package:
        here = here[:-1]
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            # `from pytest_aoti.shapes import read` may name a submodule
            names = [origin, *(f"{origin}.{alias.name}" for alias in node.names)]
        elif (
            isinstance(node, ast.Call)
            and _dynamic_import(node.func)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names = [node.args[0].value]
        for name in names:
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                found.append((name.removeprefix(PACKAGE).removeprefix("."), node.lineno))
    return found


def _dynamic_import(function: ast.expr) -> bool:
    """``importlib.import_module(...)``, ``import_module(...)`` or ``__import__(...)``."""
    if isinstance(function, ast.Attribute):
        return function.attr == "import_module"
    return isinstance(function, ast.Name) and function.id in ("import_module", "__import__")


def resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module ``name`` loads: itself, or the module that defines the attribute."""
    while name not in modules:
        if not name:
            return None
        name = name.rpartition(".")[0]
    return name


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported module: first line}, over every module of the package."""
    modules = package_modules()
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        edges: dict[str, int] = {}
        source = path.read_text(encoding="utf-8")
        found = imported_names(source, module, path.name == "__init__.py")
        for name, line in found:
            if any(at == line and _submodule_of(other, name, modules) for other, at in found):
                continue  # `from pytest_aoti import features` imports the module, not the package
            target = resolve(name, modules)
            if target is not None and target != module:
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def _submodule_of(name: str, package: str, modules: dict[str, Path]) -> bool:
    """Whether ``name`` is a module directly inside package ``package``."""
    return name in modules and name.rpartition(".")[0] == package


def floor_of(module: str) -> int | None:
    """The index of ``module``'s floor in FLOORS; None when no floor names it."""
    wanted = MODULE_FLOORS.get(module)
    top = module.partition(".")[0]
    for index, (floor, names) in enumerate(FLOORS):
        if floor == wanted or (wanted is None and top in names):
            return index
    return None


def feature_folders() -> set[str]:
    """The folders of the default plugins (``pytest_aoti.values.plugin``: ``values``)."""
    from pytest_aoti.plugins import DEFAULT_PLUGINS

    return {module.split(".")[1] for module in DEFAULT_PLUGINS.values()}


def describe(module: str) -> str:
    return PACKAGE + (f".{module}" if module else "")


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One import circle of ``graph`` as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, {})):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            cycle = visit(module)
            if cycle:
                return cycle
    return None


# --------------------------------------------------------------------------- the contract


def test_every_module_has_a_floor() -> None:
    homeless = [describe(module) for module in package_modules() if floor_of(module) is None]
    assert not homeless, (
        f"no floor for {', '.join(homeless)}: put the module in a folder of FLOORS or add "
        "it to FLOORS in tests/core/test_imports.py (and to docs/how-it-is-built.md)"
    )


def test_no_import_circle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(describe(m) for m in cycle or [])


def test_imports_point_down_the_floors() -> None:
    graph = import_graph()
    upward = []
    for module, edges in sorted(graph.items()):
        for target, line in sorted(edges.items()):
            low, high = floor_of(module), floor_of(target)
            if low is None or high is None or high <= low:
                continue
            if (module, target) in KNOWN_UPWARD:
                continue
            upward.append(
                f"{describe(module)} (floor {FLOORS[low][0]}, line {line}) imports "
                f"{describe(target)} (floor {FLOORS[high][0]})"
            )
    assert not upward, "imports pointing up:\n" + "\n".join(upward)


def test_known_upward_imports_still_exist() -> None:
    graph = import_graph()
    gone = [f"{a} -> {b}" for a, b in KNOWN_UPWARD if b not in graph.get(a, {})]
    assert not gone, f"remove from KNOWN_UPWARD in tests/core/test_imports.py: {', '.join(gone)}"


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


# --------------------------------------------------------------------------- the scanner


def test_scanner_counts_deferred_and_type_checking_imports() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import os\n"
        "from pytest_aoti.errors import AotiError\n"
        "if TYPE_CHECKING:\n"
        "    from pytest_aoti.compiling.program import AotiProgram\n"
        "def run():\n"
        "    import pytest_aoti.checks.parity\n"
        "    from pytest_aoti.shapes import read\n"
        "    class Inner:\n"
        "        def method(self):\n"
        "            from . import trees\n"
        "            from ..reports import records\n"
        "    return importlib.import_module('pytest_aoti.tester')\n"
    )
    found = imported_names(source, "triage.localize", is_package=False)
    modules = {
        name: Path()
        for name in (
            "",
            "errors",
            "compiling",
            "compiling.program",
            "checks",
            "checks.parity",
            "shapes",
            "shapes.read",
            "triage",
            "trees",
            "triage.trees",
            "reports",
            "reports.records",
            "tester",
        )
    }
    resolved = {resolve(name, modules): line for name, line in found}
    assert resolved == {
        "errors": 3,
        "compiling.program": 5,
        "checks.parity": 7,
        "shapes": 8,
        "shapes.read": 8,
        "triage": 11,
        "triage.trees": 11,
        "reports": 12,
        "reports.records": 12,
        "tester": 13,
    }


def test_cycle_finder_reports_the_circle() -> None:
    graph = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": 1}, "b": {}, "c": {"a": 1, "b": 1}}) is None


@pytest.mark.parametrize(
    ("module", "floor"),
    [
        ("errors", "base"),
        ("checks.a_check_added_later", "checks"),
        ("reports.terminal", "reports"),
        ("mutation_maps", "rules"),
        ("triage.repro_script", "features"),
        ("fleet.signing", "features"),
        ("models.hf", "features"),
        ("", "plugin"),
    ],
)
def test_floors_go_by_folder(module: str, floor: str) -> None:
    index = floor_of(module)
    assert index is not None and FLOORS[index][0] == floor


def test_the_old_circle_would_be_caught() -> None:
    """errors -> pipeline (a deferred import) -> shapes -> errors, as it was."""
    graph = import_graph()
    graph["errors"] = {**graph["errors"], "compiling.pipeline": 1}
    cycle = find_cycle(graph)
    assert cycle is not None and "errors" in cycle


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
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > MAX_FUNCTION_LINES:
                    long_functions.append(f"{describe(name)}:{node.name} ({lines})")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > MAX_STRING_LINES and id(node) not in docstrings:
                    long_strings.append(f"{describe(name)} line {node.lineno} ({lines})")
    assert not long_functions, f"functions over {MAX_FUNCTION_LINES} lines: {long_functions}"
    assert not long_strings, f"string literals over {MAX_STRING_LINES} lines: {long_strings}"


# --------------------------------------------------------------------------- the features


def feature_of(module: str) -> str | None:
    """The feature whose folder holds ``module``, or None."""
    top = module.partition(".")[0]
    return top if top in feature_folders() else None


def test_nothing_outside_a_feature_imports_its_insides() -> None:
    """A feature plugin is reached through pytest alone: the list of default plugins names
    each plugin module, and nothing outside a feature's folder imports its modules."""
    reached = []
    for module, edges in sorted(import_graph().items()):
        for target, line in sorted(edges.items()):
            owner = feature_of(target)
            if owner is None or feature_of(module) == owner or target == owner:
                continue
            reached.append(f"{describe(module)} (line {line}) imports {describe(target)}")
    assert not reached, "a feature's insides imported from outside it:\n" + "\n".join(reached)


FEATURE_DEBT: dict[str, frozenset[str]] = {}
"""Per feature folder, the core modules it still imports beside ``api``; the list only
shrinks (an entry no longer imported fails the test)."""


def test_features_import_the_api_alone() -> None:
    """A feature's modules import ``pytest_aoti.api`` and their own folder, and nothing
    else of the package: by ``import``, ``from … import``, ``import_module`` or
    ``__import__`` alike (the scanner reads all four)."""
    found: dict[str, set[str]] = {}
    for module, edges in import_graph().items():
        owner = feature_of(module)
        if owner is None:
            continue
        for target in edges:
            if target == "api" or feature_of(target) == owner:
                continue
            found.setdefault(owner, set()).add(target)
    new = {
        owner: sorted(targets - FEATURE_DEBT.get(owner, frozenset()))
        for owner, targets in found.items()
        if targets - FEATURE_DEBT.get(owner, frozenset())
    }
    assert not new, f"feature modules import the core beside pytest_aoti.api: {new}"
    paid = {
        owner: sorted(debt - found.get(owner, set()))
        for owner, debt in FEATURE_DEBT.items()
        if debt - found.get(owner, set())
    }
    assert not paid, f"remove from FEATURE_DEBT in tests/core/test_imports.py: {paid}"


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
