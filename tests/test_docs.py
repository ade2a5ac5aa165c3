"""The README and the documentation site hold what the code does.

The options page is made from the option table; here it is compared with ``pytest --help``.
Every link resolves, every sample on a page is one a test runs, and the README stays one
screenful with no figure that goes stale.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path
from types import ModuleType

import pytest

from pytest_aoti.options.table import keyword_options, rows

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
LISTING = DOCS / "_listings" / "compile-failure.txt"
PAGES = [
    README,
    ROOT / "CONTRIBUTING.md",
    ROOT / "CHANGELOG.md",
    ROOT / "benchmarks" / "README.md",
    *sorted(DOCS.glob("*.md")),
]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
"""A fenced block, its info string (a language or a directive) first."""
INCLUDE = re.compile(r"^```\{(literalinclude|include)\} (\S+)", re.MULTILINE)


def options_table() -> ModuleType:
    """The module the docs build renders the options page with."""
    spec = importlib.util.spec_from_file_location(
        "options_table", DOCS / "_ext" / "options_table.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def help_group(text: str) -> list[str]:
    """The flags of ``pytest --help``'s aoti group."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("AOTInductor checks"))
    flags = []
    for line in lines[start + 1 :]:
        if line and not line.startswith(" "):  # the next group's title
            break
        match = re.match(r"\s+(--aoti-[a-z-]+)", line)
        if match:
            flags.append(match.group(1))
    return flags


def test_the_options_page_lists_exactly_the_flags_of_pytest_help(
    pytester: pytest.Pytester,
) -> None:
    table = options_table().options_markdown()
    assert len(table) == len(rows()), "one row per option, keyword-only and ini-only ones too"
    page_flags = [
        m.group(1) for line in table if (m := re.match(r"- \*\*`(--aoti-[a-z-]+)`\*\*", line))
    ]
    result = pytester.runpytest("--help")
    assert sorted(page_flags) == sorted(help_group(result.stdout.str()))
    # every ini key and every keyword of the rows is on the page
    text = "\n".join(table)
    for option in rows():
        if option.parse is not None and option.ini_key:
            assert f"`{option.ini_key}`" in text, option.name
            assert re.search(rf"^  {option.ini_key} ", result.stdout.str(), re.MULTILINE)
        if option.marker or option.keyword:
            assert f"`{option.keyword_name}=`" in text
    assert "{aoti-options}" in (DOCS / "options.md").read_text(encoding="utf-8")


def test_the_readme_is_one_screenful_with_no_figure_that_goes_stale() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    prose = FENCE.sub("", text)  # the failure listing's figures are the report's own
    stale = [
        r"\b20\d\d-\d\d-\d\d\b",
        r"\b\d+ (passed|failed|skipped|xfailed)\b",
        r"\bin \d+(\.\d+)? ?s\b",
        r"\b\d+ min\b",
    ]
    for pattern in stale:
        assert not re.search(pattern, prose), pattern


def slug(heading: str) -> str:
    """MyST's (and GitHub's) anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_link_resolves_to_a_page_or_a_file(page: Path) -> None:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve()
        assert resolved.exists(), f"{page.name}: {target}"
        if resolved.parent == DOCS and resolved.suffix == ".md":
            assert not resolved.name.startswith("_"), f"{page.name}: {target} is not a page"
        if anchor:
            assert anchor in anchors(resolved), f"{page.name}: {target}"


def test_every_page_is_in_the_site_and_every_include_exists() -> None:
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    for page in DOCS.glob("*.md"):
        if page.name != "index.md":
            assert re.search(rf"^{page.stem}$", index, re.MULTILINE), page.name
    for page in DOCS.glob("*.md"):
        for _, target in INCLUDE.findall(page.read_text(encoding="utf-8")):
            assert (DOCS / target).resolve().exists(), f"{page.name}: {target}"


def test_every_sample_on_a_page_is_one_the_tests_run() -> None:
    """Python, ini and YAML samples are included from files the tests run, or are the ones
    ``tests/test_readme.py`` runs as written (the first test, the conftest, the ini file, the
    CI workflow's install lines)."""
    run_as_written = {
        ("README.md", "python"),
        ("getting-started.md", "python"),
        ("in-your-repo.md", "python"),
        ("in-your-repo.md", "ini"),
        ("cache.md", "yaml"),
    }
    for page in PAGES:
        for language, _ in FENCE.findall(page.read_text(encoding="utf-8")):
            if language in ("python", "ini", "yaml", "toml"):
                assert (page.name, language) in run_as_written, f"{page.name}: {language}"
        for kind, target in INCLUDE.findall(page.read_text(encoding="utf-8")):
            if kind == "literalinclude":
                top = (DOCS / target).resolve().relative_to(ROOT).parts[0]
                assert top in ("examples", "tests", "docs"), target


def test_the_readme_names_every_keyword_of_aoti_check() -> None:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## What `aoti.check` takes\n")
    table = text[start : text.index("\n## ", start + 1)]
    named = set(re.findall(r"`(\w+)=", table))
    explicit = {"mutates", "mutated_buffers", "calls", "samples", "dynamic_shapes"}
    assert named == set(keyword_options()) | explicit


def test_the_readme_failure_report_is_the_listing_the_triage_test_keeps() -> None:
    section = README.read_text(encoding="utf-8").split("\n## A failure report\n")[1]
    [listing] = re.findall(r"^```text\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
    assert listing == LISTING.read_text(encoding="utf-8")


def spec_lines() -> list[tuple[str, list[str]]]:
    """The specs page's ``pytest --aoti-model=...`` lines (not its ``mymodels`` stand-ins)."""
    text = (DOCS / "specs.md").read_text(encoding="utf-8")
    found = []
    for block in re.findall(r"^```bash\n(.*?)^```$", text, re.MULTILINE | re.DOTALL):
        for line in block.splitlines():
            words = shlex.split(line.split("#")[0])
            specs = [word for word in words if word.startswith("--aoti-model=")]
            if words[:1] == ["pytest"] and specs and not any("mymodels" in s for s in specs):
                found.append((line, specs))
    return found


@pytest.mark.parametrize(("line", "specs"), spec_lines(), ids=[line for line, _ in spec_lines()])
def test_the_specs_page_names_specs_that_resolve(
    pytester: pytest.Pytester, line: str, specs: list[str]
) -> None:
    """Each spec line of the page resolves where its library is installed: listed with
    ``--aoti-models-list``, which builds the inputs and compiles nothing."""
    for library in ("timm", "torchvision", "transformers"):
        prefix = "hf" if library == "transformers" else library
        if any(spec.startswith(f"--aoti-model={prefix}:") for spec in specs):
            if importlib.util.find_spec(library) is None:
                pytest.skip(f"{library} is not installed")
    result = pytester.runpytest_subprocess("--aoti-models-list", "--aoti-device=cpu", *specs)
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
