"""Which tests the engine child served last run: a marker per test id, written on change."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_aoti.cache.served_tests import FOLDER, ServedTests


def test_a_served_test_is_remembered_until_it_is_not_served(tmp_path: Path) -> None:
    served = ServedTests(tmp_path)
    assert served.served_before("t.py::test_big[cpu]") is None
    served.note("t.py::test_big[cpu]", "abc123")
    served.note("t.py::test_small[cpu]", None)
    again = ServedTests(tmp_path)  # the next run
    assert again.served_before("t.py::test_big[cpu]") == "abc123"
    assert again.served_before("t.py::test_small[cpu]") is None
    assert len(list((tmp_path / FOLDER).iterdir())) == 1
    again.note("t.py::test_big[cpu]", "def456")  # a new program
    assert ServedTests(tmp_path).served_before("t.py::test_big[cpu]") == "def456"
    again.note("t.py::test_big[cpu]", None)
    assert ServedTests(tmp_path).served_before("t.py::test_big[cpu]") is None


def test_an_unwritable_root_is_no_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    served = ServedTests(blocker)  # its folder cannot be made
    served.note("t.py::test_big[cpu]", "abc123")
    assert served.served_before("t.py::test_big[cpu]") is None


RECORD_STARTS = """
from pathlib import Path

import pytest_aoti.session as session_module

STARTS = []
_original = session_module.prestart_engine_child
session_module.prestart_engine_child = lambda: STARTS.append("started")


def pytest_collection_finish(session):
    Path("starts.txt").write_text(str(len(STARTS)))


def pytest_unconfigure(config):
    session_module.prestart_engine_child = _original
"""


def test_the_child_starts_with_the_session_where_the_last_run_served_a_test(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    pytester.makeconftest(RECORD_STARTS)
    pytester.makepyfile(test_plain="def test_nothing():\n    pass\n")
    args = ("--aoti-device=cpu", f"--aoti-cache-dir={cache}", "-p", "no:xdist")
    pytester.runpytest(*args).assert_outcomes(passed=1)
    assert (pytester.path / "starts.txt").read_text() == "0"  # nothing served: no child
    ServedTests(cache).note("test_big.py::test_big[cpu]", "abc123")
    pytester.runpytest(*args).assert_outcomes(passed=1)
    # asked before the first test module is collected: it imports torch meanwhile
    assert (pytester.path / "starts.txt").read_text() == "1"
