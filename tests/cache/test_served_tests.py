"""Which tests the engine child served last run: a marker per test id, written on change."""

from __future__ import annotations

from pathlib import Path

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
