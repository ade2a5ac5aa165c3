"""The session's one collection at its end, and the freeze that makes pytest's own two walk
only what is made after it. No compile here: the freeze is the same in every session."""

from __future__ import annotations

import gc
import textwrap

import pytest

# a conftest that says, at each full collection and at the process's exit, whether objects
# were frozen then, and where the session's tests had all run
WITNESS = """
    import atexit, gc, pytest

    def say(phase, info):
        if phase == "start" and info["generation"] == 2:
            print(f"full collection, frozen: {gc.get_freeze_count() > 0}")

    gc.callbacks.append(say)
    atexit.register(lambda: print(f"frozen at exit: {gc.get_freeze_count() > 0}"))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(session):
        print("session finished")
"""


def collections_at_the_end(lines: list[str], exit_line: str) -> list[str]:
    """The full collections between the session's last test and the process's atexit."""
    # pytest's progress line has no newline yet when the session finishes
    start = next(at for at, line in enumerate(lines) if line.endswith("session finished"))
    end = lines[start : lines.index(exit_line)]
    return [line for line in end if line.startswith("full collection")]


CYCLE = """
    class Cycle:
        def __init__(self):
            self.me = self

        def __del__(self):
            raise RuntimeError("the finalizer of a cycle")

    def test_leaves_a_cycle():
        Cycle()
"""


def test_pytest_collects_past_the_frozen_objects_and_they_thaw_after(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(WITNESS)
    pytester.makepyfile(CYCLE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    # the session's own collection, then pytest's two (its unconfigure's and its cleanup's)
    # past the frozen objects; thawed before the exit
    assert collections_at_the_end(result.stdout.lines, "frozen at exit: False") == [
        "full collection, frozen: False",
        "full collection, frozen: True",
        "full collection, frozen: True",
    ]
    # the garbage of the session was collected before the freeze: its finalizer's error is
    # reported as pytest reports it
    output = result.stdout.str() + result.stderr.str()
    assert "PytestUnraisableExceptionWarning" in output
    assert "RuntimeError: the finalizer of a cycle" in output


def test_a_freeze_of_the_users_own_is_left_to_them(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        textwrap.dedent(WITNESS)
        + textwrap.dedent(
            """
            def pytest_configure(config):
                gc.freeze()
            """
        )
    )
    pytester.makepyfile(CYCLE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    # not thawed by the session: the user's freeze is still theirs at the exit
    result.stdout.fnmatch_lines(["frozen at exit: True"])


def test_a_run_without_pytests_collections_freezes_nothing(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(WITNESS)
    pytester.makepyfile("def test_nothing(): pass")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:unraisableexception")
    result.assert_outcomes(passed=1)
    # neither pytest nor the session collects at the end
    assert collections_at_the_end(result.stdout.lines, "frozen at exit: False") == []


def test_an_in_process_run_freezes_nothing(pytester: pytest.Pytester) -> None:
    # pytester's in-process runs collect nothing at their end: neither does the session (a
    # hook after every other unconfigure says whether objects were frozen then)
    pytester.makeconftest(
        """
        import gc, pytest

        @pytest.hookimpl(trylast=True)
        def pytest_unconfigure(config):
            print(f"frozen while pytest collects: {gc.get_freeze_count() > 0}")
        """
    )
    pytester.makepyfile("def test_nothing(): pass")
    assert gc.get_freeze_count() == 0
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["frozen while pytest collects: False"])
    assert gc.get_freeze_count() == 0
