"""Hypothesis' terminal summary is left out only where it has nothing to show; no compile."""

from __future__ import annotations

import textwrap

import pytest

# Records, as the run ends, whether the test process ever imported Hypothesis.
RECORD_IMPORT = textwrap.dedent(
    """
    import sys
    from pathlib import Path


    def pytest_unconfigure(config):
        if not hasattr(config, "workerinput"):
            Path("imported.txt").write_text(str("hypothesis" in sys.modules))
    """
)

GIVEN_TEST = textwrap.dedent(
    """
    from hypothesis import given, strategies as st


    @given(st.integers())
    def test_any_integer(n):
        assert n == n
    """
)


def test_a_run_that_never_used_hypothesis_never_imports_it(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(RECORD_IMPORT)
    pytester.makepyfile(test_plain="def test_plain():\n    assert True\n")

    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist")

    result.assert_outcomes(passed=1)
    assert (pytester.path / "imported.txt").read_text() == "False"


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist"])
def test_hypothesis_statistics_are_still_shown(
    pytester: pytest.Pytester, workers: list[str]
) -> None:
    pytester.makeconftest(RECORD_IMPORT)
    pytester.makepyfile(test_given=GIVEN_TEST)

    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--hypothesis-show-statistics", *workers
    )

    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*Hypothesis Statistics*", "*test_any_integer*"])
