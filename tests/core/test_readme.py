"""The README's and the docs' snippets run as written, on this machine.

The first test is taken from README.md and the getting-started page, the conftest and the ini
file from the "Using it in your repo" page, the fixture-scope sample and its Hypothesis
settings from the "Writing AOTI tests" page, so an edit that breaks them fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parents[2] / "README.md"
DOCS = README.parent / "docs"


def section(title: str, page: Path = README) -> str:
    """The ``## title`` section of a page; ``# title``, the page's own title, is all of it."""
    text = page.read_text(encoding="utf-8")
    if text.startswith(f"# {title}\n"):
        return text
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)


@pytest.mark.compiles
def test_readme_snippets_run_as_written(pytester: pytest.Pytester, shared_cache_dir: Path) -> None:
    [first_test] = blocks(section("Add it to your project"), "python")
    assert blocks(section("Getting started", DOCS / "getting-started.md"), "python") == [first_test]
    in_your_repo = section("Using it in your repo", DOCS / "in-your-repo.md")
    [conftest] = blocks(in_your_repo, "python")
    [ini] = blocks(in_your_repo, "ini")
    pytester.makeconftest(conftest)
    pytester.makefile(".ini", pytest=ini)
    tests = pytester.mkdir("tests")
    (tests / "test_aoti_first.py").write_text(first_test, encoding="utf-8")

    # a process of its own: the conftest's O0 wrapper builds would cost every later O1
    # compile of this process its precompiled header; the shared cache spares a rerun
    result = pytester.runpytest_subprocess(f"--aoti-cache-dir={shared_cache_dir}", "-rs")

    result.stdout.fnmatch_lines(["configfile: pytest.ini"])
    if torch.cuda.is_available():
        result.assert_outcomes(passed=2)
    else:
        result.assert_outcomes(passed=1, skipped=1)
        result.stdout.fnmatch_lines(
            [
                "aoti: skipped the [[]cuda] tests: aoti_device in the ini names cuda, but "
                "torch.cuda.is_available() is False on this machine*"
            ]
        )
        result.stdout.fnmatch_lines(
            ["SKIPPED [[]1] *aoti_device in the ini names cuda, but torch.cuda.is_available()*"]
        )
    packages = list((pytester.path / "artifacts").glob("*.pt2"))
    assert len(packages) == 1, packages  # pytest_aoti_program_ready kept the package
    assert (pytester.path / "reports" / "aoti.json").is_file()


SCOPE_TRAPS = """

from hypothesis import HealthCheck, given, settings, strategies as st


@pytest.fixture(scope="module")
def wide_tester(aoti):
    return aoti


def test_a_module_fixture_cannot_request_aoti(wide_tester):
    pass


@given(st.integers(0, 2))
def test_given_unsuppressed(aoti, linear, n):
    pass


{settings}
@given(st.integers(0, 2))
def test_given_suppressed(aoti, linear, n):
    module, args = linear
    aoti.check(module, args)
"""


@pytest.mark.compiles
def test_the_fixture_scope_section_runs_as_written(
    pytester: pytest.Pytester, shared_cache_dir: Path
) -> None:
    """The page's sample shares one program between its tests; a module fixture that asks
    for ``aoti`` is pytest's ScopeMismatch; a ``@given`` test that does fails Hypothesis'
    health check, and passes with the page's settings, every example a check of the same
    program."""
    text = section("Fixture scope: module fixtures and `@given` tests", DOCS / "writing-tests.md")
    sample = blocks(text, "python")[0]
    [suppressed] = re.findall(r"`(@settings\(suppress_health_check=[^`]*)`", text)
    pytester.makepyfile(test_scope=sample + SCOPE_TRAPS.format(settings=suppressed))
    result = pytester.runpytest(
        "--aoti-device=cpu", f"--aoti-cache-dir={shared_cache_dir}", "--aoti-report=r.json"
    )
    result.assert_outcomes(passed=3, failed=1, errors=1)
    result.stdout.fnmatch_lines(["*ScopeMismatch: *function scoped fixture aoti*"])
    result.stdout.fnmatch_lines(["*FailedHealthCheck*uses a function-scoped fixture 'aoti'*"])
    report = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    records = report["checks"] + report["compiles"]
    assert len({record["program"] for record in records}) == 1, records
    given = [r for r in report["checks"] if "test_given_suppressed" in r["test"]]
    assert len(given) >= 2 and sorted(r["check_index"] for r in given) == list(
        range(1, len(given) + 1)
    )


def test_cuda_in_the_ini_is_a_skip_but_on_the_command_line_an_error(
    pytester: pytest.Pytester,
) -> None:
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    pytester.makeini("[pytest]\naoti_device = cuda\n")
    pytester.makepyfile("def test_x(aoti_device): pass")
    result = pytester.runpytest()
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["aoti: skipped the [[]cuda] tests: *"])
    result = pytester.runpytest("--aoti-device=cpu,cuda")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


# `pip install` of the name alone (any extras), from the package index: not this project
BARE_INSTALL = re.compile(
    r"pip install\b[^\n`]*?(?<![\w/.@+-])([\"']?)pytest-aoti(\[[^\]\s]*\])?\1(?!\s*@)(?=[\s`;&)\"']|$)"
)
REPOSITORY_INSTALL = '"pytest-aoti{} @ git+https://github.com/<org>/pytest-aoti"'


@pytest.mark.parametrize(
    ("line", "bare"),
    [
        ("pip install pytest-aoti", True),
        ('pip install "pytest-aoti[s3]"', True),
        ("pip install 'pytest-aoti[hf]' (or transformers)", True),
        ("pip install -e . pytest-aoti[remote] && python", True),
        ('_INSTALL = "pip install pytest-aoti[remote]"', True),
        ('f"pip install pytest-aoti[{extra}] (or pip install {package})"', True),
        (f"pip install {REPOSITORY_INSTALL.format('[s3]')}", False),
        ('pip install -e "/work/pytest-aoti[s3]"', False),
        ("pip install /path/to/pytest-aoti", False),
        ("pip install pytest-aoti-extras", False),
    ],
)
def test_the_bare_install_pattern(line: str, bare: bool) -> None:
    assert bool(BARE_INSTALL.search(line)) is bare


def test_no_install_line_or_hint_names_the_bare_package() -> None:
    """Every install line and hint installs this project, never the index's ``pytest-aoti``."""
    package = README.parent / "pytest_aoti"
    pages = [README, README.parent / "CONTRIBUTING.md", *sorted(DOCS.glob("*.md"))]
    for path in [*pages, *sorted(package.rglob("*.py"))]:
        text = path.read_text(encoding="utf-8")
        assert not [match.group(0) for match in BARE_INSTALL.finditer(text)], path


def test_ci_snippets_install_the_plugin_as_the_first_section_does() -> None:
    """The CI examples' install lines name this project's repository, as "Add it to your
    project" does, and the code's hints name where it was installed from."""
    from pytest_aoti.errors import install_hint

    [first] = blocks(section("Add it to your project"), "bash")
    assert f"pip install {REPOSITORY_INSTALL.format('')}" in first
    fleet = section("The CI fleet store", DOCS / "cache.md")
    lines = [
        line
        for block in blocks(fleet, "yaml") + blocks(fleet, "")
        for line in block.splitlines()
        if "pip install" in line and "pytest-aoti" in line
    ]
    assert len(lines) >= 3, lines  # the store's extra, the shards and the merge job
    for line in lines:
        assert REPOSITORY_INSTALL.format("[s3]") in line or REPOSITORY_INSTALL.format("") in line
    hint = install_hint("s3")
    assert "pytest-aoti[s3] @ " in hint or hint.endswith('[s3]"'), hint
    assert not BARE_INSTALL.search(hint)


@pytest.mark.parametrize(
    ("recorded", "hint"),
    [
        (
            '{"url": "file:///src/pytest-aoti", "dir_info": {"editable": true}}',
            'pip install -e "/src/pytest-aoti[s3]"',
        ),
        (
            '{"url": "file:///src/pytest-aoti", "dir_info": {}}',
            'pip install "/src/pytest-aoti[s3]"',
        ),
        (
            '{"url": "https://example.org/team/pytest-aoti", "vcs_info": {"vcs": "git"}}',
            'pip install "pytest-aoti[s3] @ git+https://example.org/team/pytest-aoti"',
        ),
        (None, f"pip install {REPOSITORY_INSTALL.format('[s3]')}"),
    ],
)
def test_the_install_hint_names_where_the_plugin_came_from(
    monkeypatch: pytest.MonkeyPatch, recorded: str | None, hint: str
) -> None:
    from importlib import metadata

    from pytest_aoti.errors import install_hint

    class Installed:
        def read_text(self, name: str) -> str | None:
            return recorded if name == "direct_url.json" else None

    monkeypatch.setattr(metadata, "distributions", lambda **_: [Installed()])
    assert install_hint("s3") == hint
    assert not BARE_INSTALL.search(install_hint("s3"))


@pytest.mark.parametrize(
    ("fields", "hint"),
    [
        (
            [
                ("Project-URL", "Documentation, https://docs.example.org/aoti"),
                ("Project-URL", "Source, https://example.org/team/pytest-aoti"),
            ],
            'pip install "pytest-aoti[s3] @ git+https://example.org/team/pytest-aoti"',
        ),
        (
            [("Home-page", "https://example.org/home/pytest-aoti")],
            'pip install "pytest-aoti[s3] @ git+https://example.org/home/pytest-aoti"',
        ),
        (
            [("Project-URL", "Documentation, https://docs.example.org/aoti")],
            f"pip install {REPOSITORY_INSTALL.format('[s3]')}",
        ),
    ],
)
def test_the_install_hint_falls_back_to_the_repository_the_metadata_names(
    monkeypatch: pytest.MonkeyPatch, fields: list[tuple[str, str]], hint: str
) -> None:
    """Installed without pip's record of where from (a wheel from a local index, a build
    tool that writes none): the repository the package's metadata names."""
    from email.message import Message
    from importlib import metadata

    from pytest_aoti.errors import install_hint

    message = Message()
    for name, value in fields:
        message[name] = value

    class Installed:
        metadata = message

        def read_text(self, name: str) -> str | None:
            return None

    monkeypatch.setattr(metadata, "distributions", lambda **_: [Installed()])
    assert install_hint("s3") == hint
    assert not BARE_INSTALL.search(hint)
