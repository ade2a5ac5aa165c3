"""The README's "Using it in your repo" snippets run as written, on this machine.

The conftest, the ini file and the first test are taken from README.md itself, so an edit
that breaks them fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parent.parent / "README.md"


def section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)


def test_readme_snippets_run_as_written(pytester: pytest.Pytester, shared_cache_dir: Path) -> None:
    [first_test] = blocks(section("Add it to your project"), "python")
    [conftest] = blocks(section("Using it in your repo"), "python")
    [ini] = blocks(section("Using it in your repo"), "ini")
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
