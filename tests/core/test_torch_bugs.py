"""The known torch bugs gate what names them: messages on a torch that may have the bug,
strict xfails on the releases measured to have it."""

from __future__ import annotations

import pytest

from pytest_aoti.torch_bugs import BUFFER_STATE_NOT_CARRIED, TorchBug, release

FIXED = TorchBug("o/r#1", "wrong", measured=("2.11.0", "2.14.1"), fixed_in="2.15.0")
OPEN = TorchBug("o/r#2", "still wrong", measured=("2.13.0", "2.15.0"))


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("2.13.0", (2, 13, 0)),
        ("2.14.1+cu130", (2, 14, 1)),
        ("2.15.0+cpu", (2, 15, 0)),
        ("2.16.0a0+git1234abc", (2, 16, 0)),
        ("2.16.0.dev20270101", (2, 16, 0)),
        ("2.16", (2, 16)),
    ],
)
def test_release(version: str, expected: tuple[int, ...]) -> None:
    assert release(version) == expected


@pytest.mark.parametrize(
    ("version", "measured", "possible"),
    [
        ((2, 10, 0), False, True),  # older than measured: may have it, not strict
        ((2, 11, 0), True, True),
        ((2, 12, 1), True, True),  # between two measured releases
        ((2, 14, 1), True, True),
        ((2, 15, 0), False, False),  # the first release measured without it
        ((2, 16, 0), False, False),
    ],
)
def test_a_fixed_bug(version: tuple[int, ...], measured: bool, possible: bool) -> None:
    assert FIXED.measured_in(version) is measured
    assert FIXED.possible_in(version) is possible


def test_an_open_bug_is_possible_on_every_release_and_strict_where_measured() -> None:
    assert OPEN.possible_in((2, 99, 0))
    assert OPEN.measured_in((2, 15, 0))
    assert not OPEN.measured_in((2, 16, 0))  # not measured yet: a pass there is an XPASS
    assert OPEN.reason() == "o/r#2: still wrong"


def test_the_buffer_bug_was_fixed_in_2_15() -> None:
    assert BUFFER_STATE_NOT_CARRIED.issue == "pytorch/pytorch#165444"
    assert BUFFER_STATE_NOT_CARRIED.possible_in((2, 14, 1))
    assert not BUFFER_STATE_NOT_CARRIED.possible_in((2, 15, 0))
