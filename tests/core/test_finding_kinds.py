"""Finding kinds are one str-valued enum: every producer and renderer uses it, a string kind
is taken as its member, and an unknown kind is refused."""

from __future__ import annotations

import json

import pytest

from pytest_aoti.findings import (
    PARITY_KINDS,
    REPRODUCIBLE_KINDS,
    Finding,
    FindingKind,
    plain_finding,
)


def test_a_kind_is_its_string_everywhere() -> None:
    assert FindingKind.BUFFER == "buffer"
    assert f"{FindingKind.MUTATED_INPUT}" == str(FindingKind.MUTATED_INPUT) == "mutated input"
    assert json.dumps({"kind": FindingKind.IN_PLACE}) == '{"kind": "in-place"}'


def test_a_finding_takes_a_string_kind_as_its_member_and_refuses_an_unknown_one() -> None:
    finding = Finding(kind="buffer", location="buffer 'calls'", summary="")  # type: ignore[arg-type]
    assert finding.kind is FindingKind.BUFFER
    assert finding.to_json()["kind"] == "buffer"
    assert plain_finding("threads", "differs").kind is FindingKind.THREADS
    with pytest.raises(ValueError, match="'bufer' is not a valid FindingKind"):
        Finding(kind="bufer", location="", summary="")  # type: ignore[arg-type]


def test_the_kind_sets_hold_members() -> None:
    assert FindingKind.BUFFER in REPRODUCIBLE_KINDS and FindingKind.BUFFER not in PARITY_KINDS
    assert "output" in PARITY_KINDS  # a str compares with its member
