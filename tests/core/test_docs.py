"""The README and the documentation site hold what the code does.

The options page holds the table the option rows make, written into it; here it is compared
with the rows and ``pytest --help``, and the keyword lists the pages write out with the table
and the tester's signatures. Every
link resolves, every sample on a page is one a test runs or a copy of the file it links, every
directive reads on the repository host (which shows ``docs/*.md`` as plain Markdown), and
the README stays one screenful with no figure that goes stale.
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import os
import re
import shlex
from pathlib import Path
from types import ModuleType

import pytest

from pytest_aoti.options import keywords
from pytest_aoti.plugins import default_catalog

RUN = default_catalog()
"""The whole option table, also where the run blocks the feature plugins."""

ROOT = Path(__file__).resolve().parents[2]
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
    """The module that writes the options page's table (and that the docs build checks it
    with)."""
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
    assert len(table) == len(RUN.rows()), "one row per option, keyword-only and ini-only ones too"
    page_flags = [
        m.group(1) for line in table if (m := re.match(r"- \*\*`(--aoti-[a-z-]+)`\*\*", line))
    ]
    result = pytester.runpytest("--help")
    assert sorted(page_flags) == sorted(help_group(result.stdout.str()))
    # every ini key and every keyword of the rows is on the page
    text = "\n".join(table)
    for option in RUN.rows():
        if option.parse is not None and option.ini_key:
            assert f"`{option.ini_key}`" in text, option.name
            assert re.search(rf"^  {option.ini_key} ", result.stdout.str(), re.MULTILINE)
        if option.marker or option.keyword:
            assert f"`{option.keyword_name}=`" in text


def test_the_options_page_holds_the_table_the_rows_make() -> None:
    """Read as plain Markdown (in a clone, on the repository host), the options page lists
    every option: the table is written into it, between its begin and end lines, and is the
    one the rows make. Under ``AOTI_REGENERATE_LISTINGS=1`` it is written again."""
    module = options_table()
    page = DOCS / "options.md"
    text = page.read_text(encoding="utf-8")
    current = module.page_with_table(text)
    if current != text and os.environ.get("AOTI_REGENERATE_LISTINGS") == "1":
        page.write_text(current, encoding="utf-8")
        text = page.read_text(encoding="utf-8")
    changed = [
        line[:120]
        for line in difflib.ndiff(text.splitlines(), current.splitlines())
        if line.startswith(("- ", "+ "))
    ]
    stale = bool(changed)
    assert not stale, (
        f"docs/options.md lists other options than the rows make: {module.REGENERATE}\n"
        + "\n".join(changed[:12])
    )


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
    """Python, ini and YAML samples are copies of files the tests run (checked below), or are
    the ones ``tests/core/test_readme.py`` runs as written (the first test, the conftest, the ini
    file, the fixture-scope sample, the CI workflow's install lines)."""
    run_as_written = {
        ("README.md", "python"): 1,
        ("getting-started.md", "python"): 1,
        ("in-your-repo.md", "python"): 1,
        ("in-your-repo.md", "ini"): 1,
        ("writing-tests.md", "python"): 1,
        ("cache.md", "yaml"): 1,
    }
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        found: dict[tuple[str, str], int] = {}
        for match in FENCE.finditer(text):
            language = match.group(1)
            if (
                language in ("python", "ini", "yaml", "toml")
                and copied_from(page, text, match) is None
            ):
                found[page.name, language] = found.get((page.name, language), 0) + 1
        for key, count in found.items():
            assert run_as_written.get(key) == count, f"{key}: {count} sample(s) no test runs"
        assert not re.search(r"^```\{literalinclude\}", text, re.MULTILINE), (
            f"{page.name}: show the file's text in a plain block after a link to it"
        )


def copied_from(page: Path, text: str, block: re.Match[str]) -> Path | None:
    """The file a fenced block of ``page`` copies: the last link of the paragraph before
    it, where that names a file of ``examples/``, ``tests/`` or ``docs/_listings/``."""
    paragraph = text[: block.start()].rstrip("\n").rsplit("\n\n", 1)[-1]
    targets = LINK.findall(paragraph)
    if not targets or paragraph.startswith("```"):
        return None
    path = (page.parent / targets[-1]).resolve()
    parts = path.relative_to(ROOT).parts if path.is_relative_to(ROOT) else ()
    copyable = parts[:1] in (("examples",), ("tests",)) or parts[:2] == ("docs", "_listings")
    return path if copyable and path.is_file() else None


def source_of(path: Path, block: str) -> str:
    """What ``block`` must be to copy ``path``: the whole file, or for Python the file's
    top-level definitions the block holds, with their decorators, in the block's order."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".py" or block == text:
        return text
    lines = text.splitlines()
    defined = {
        node.name: node
        for node in ast.parse(text).body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }
    shown = []
    for node in ast.parse(block).body:
        name = getattr(node, "name", None)
        assert name in defined, f"{path.name} defines no {name or type(node).__name__}"
        found = defined[name]
        start = found.decorator_list[0].lineno if found.decorator_list else found.lineno
        shown.append("\n".join(lines[start - 1 : found.end_lineno]))
    return "\n\n\n".join(shown) + "\n"


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda page: page.name)
def test_every_copy_on_a_page_is_the_file_it_links(page: Path) -> None:
    """A sample or listing shown on a page is the text of the file linked just before it,
    so the page reads on the repository host and on the site alike. Under
    ``AOTI_REGENERATE_LISTINGS=1`` the page's copies are written again from their files."""
    text = page.read_text(encoding="utf-8")
    stale = []
    for match in reversed(list(FENCE.finditer(text))):
        path = copied_from(page, text, match)
        if path is None:
            continue
        expected = source_of(path, match.group(2))
        if match.group(2) != expected:
            stale.append(str(path.relative_to(ROOT)))
            start, end = match.span(2)
            text = text[:start] + expected + text[end:]
    if stale and os.environ.get("AOTI_REGENERATE_LISTINGS") == "1":
        page.write_text(text, encoding="utf-8")
    assert not stale, (
        f"docs/{page.name} shows an old copy of {', '.join(stale)}: rerun this test with "
        "AOTI_REGENERATE_LISTINGS=1"
    )


GENERATED = ("eval-rst", "include")
"""Directives whose content the site makes when it is built."""
BUILD = "`sphinx-build docs docs/_build/html`"
NOTE = "when the site is built"
DIRECTIVE = re.compile(r"\{([\w-]+)\}")


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda page: page.name)
def test_every_directive_on_a_page_reads_on_the_repository_host(page: Path) -> None:
    """The repository host shows ``docs/*.md`` as plain Markdown, MyST directives as raw
    blocks. A block the site makes when it is built follows a note that says so and names
    the files it is made from, on a page that says how to build the site; a table of
    contents is hidden, its pages linked in plain Markdown on the page; no page uses an
    inline role."""
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"\{[\w:-]+\}`", FENCE.sub("", text)), f"{page.name}: an inline role"
    for match in FENCE.finditer(text):
        directive = DIRECTIVE.match(match.group(1))
        if directive is None:
            continue
        name, body = directive.group(1), match.group(2)
        before = text[: match.start()]
        where = f"{page.name}: the {{{name}}} block at line {before.count(chr(10)) + 1}"
        if name == "toctree":
            assert ":hidden:" in body, f"{where} shows raw: hide it and link its pages"
            for entry in re.findall(r"^([\w-]+)$", body, re.MULTILINE):
                assert f"]({entry}.md)" in text, f"{where}: {entry} is not linked on the page"
            continue
        assert name in GENERATED, f"{where} shows raw on the repository host"
        note = before.rstrip("\n").rsplit("\n\n", 1)[-1]
        assert NOTE in " ".join(note.split()), f"{where}: say it is made {NOTE}"
        named = [span for span in re.findall(r"`([^`\s]+)`", note) if (ROOT / span).is_file()]
        assert named, f"{where}: name the file(s) it is made from"
        assert BUILD in before, f"{where}: say how to build the site ({BUILD})"


@pytest.mark.parametrize("page", ["changelog.md", "contributing.md"])
def test_an_included_page_keeps_the_title_of_its_file(page: str) -> None:
    text = (DOCS / page).read_text(encoding="utf-8")
    [(target, options)] = re.findall(
        r"^```\{include\} (\S+)\n((?::[\w-]+:.*\n)*)```$", text, re.MULTILINE
    )
    assert ":start-line: 1\n" in options  # the file's own title line is left out
    included = (DOCS / target).read_text(encoding="utf-8")
    assert text.splitlines()[0] == included.splitlines()[0]


def test_the_readme_names_every_keyword_of_aoti_check() -> None:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## What `aoti.check` takes\n")
    table = text[start : text.index("\n## ", start + 1)]
    named = set(re.findall(r"`(\w+)=", table))
    assert named == set(RUN.check_keywords())


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


def test_the_marker_line_on_the_page_is_the_one_pytest_markers_prints(
    pytester: pytest.Pytester,
) -> None:
    result = pytester.runpytest("--markers")
    [line] = [line for line in result.stdout.lines if line.startswith("@pytest.mark.aoti(")]
    signature = line.split("): ", 1)[0] + ")"
    assert signature == f"@pytest.mark.aoti({', '.join(f'{k}=None' for k in RUN.marker_options())})"
    page = (DOCS / "writing-tests.md").read_text(encoding="utf-8")
    assert f"\n`{signature}`\n" in page


def test_the_writing_tests_page_names_every_keyword_of_check_and_compile() -> None:
    """The signatures the page shows and its list of ``aoti.check`` options are the tester's
    and the table's."""
    page = " ".join((DOCS / "writing-tests.md").read_text(encoding="utf-8").split())

    def shown(place: keywords.Place, rest: str) -> str:
        first, *others = (f"{name}=None" for name in place.call)  # kwargs, then keyword-only
        return f"`{place.title[:-2]}(module, args, {first}, *, {', '.join(others)}{rest}`"

    assert shown(keywords.COMPILE, ") -> AotiProgram") in page
    assert shown(keywords.CHECK, ", **options) -> CheckResult") in page
    listed = page.split("where the options are the keywords ", 1)[1].split(" (each checked", 1)[0]
    assert re.findall(r"`(\w+)`", listed) == list(RUN.keyword_options())


def test_the_options_page_says_which_options_lack_a_place() -> None:
    """The options page's opening names, from the rows, the options without an ini twin,
    the ini-only ones and the keywords that are nothing else."""
    opening = " ".join((DOCS / "options.md").read_text(encoding="utf-8").split("\n\n")[1].split())

    def named(words: list[str]) -> str:
        spans = [f"`{word}`" for word in words]
        return ", ".join(spans[:-1]) + f" and {spans[-1]}" if len(spans) > 1 else spans[0]

    parsed = [option for option in RUN.rows() if option.parse is not None]
    no_ini = [f"--{option.name}" for option in parsed if option.ini_key is None]
    ini_only = [option.ini_key or "" for option in parsed if not option.cli and not option.flag]
    keyword_only = [option.keyword_name for option in RUN.rows() if option.parse is None]
    assert f"Every option but {named(no_ini)} has an ini twin" in opening
    assert f"{named(ini_only)} are ini-only" in opening
    assert f"{named(keyword_only)} are keywords only" in opening


def test_the_values_page_says_where_each_of_its_options_is_set() -> None:
    """Each option of the generated values' page names the places its row has: marker and
    ``aoti.check`` keyword, flag, ini key."""
    text = (DOCS / "values.md").read_text(encoding="utf-8")
    section = text.split("\n## Options\n\n", 1)[1].split("\n\n", 1)[0]
    by_name = {option.keyword_name: option for option in RUN.rows()}
    entries = {
        match.group(1): " ".join(match.group(2).split())
        for match in re.finditer(r"^- `(\w+)=(.*?)(?=^- |\Z)", section, re.MULTILINE | re.DOTALL)
    }
    assert list(entries) == [name for name in by_name if name.startswith("values")]
    for name, said in entries.items():
        option = by_name[name]
        keyword = "marker and `aoti.check` keyword" in said
        assert keyword == (option.marker and option.keyword), name
        assert (f"`--{option.name}`" in said) == (option.parse is not None and option.cli), name
        ini = option.ini_key if option.parse is not None else None
        assert (f"ini `{ini}`" in said) == (ini is not None), name
