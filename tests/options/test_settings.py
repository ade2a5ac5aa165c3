"""Option parsing: pure logic, no pytest session and no torch."""

from __future__ import annotations

import argparse

import pytest

from pytest_aoti.options.parsers import parse_cache_mode, parse_devices, parse_size


@pytest.mark.parametrize(
    ("text", "devices"),
    [
        ("cpu", ("cpu",)),
        ("auto", ("auto",)),
        ("cuda:1", ("cuda:1",)),
        (" CPU , cuda ", ("cpu", "cuda")),
    ],
)
def test_device_lists(text: str, devices: tuple[str, ...]) -> None:
    assert parse_devices(text) == devices


@pytest.mark.parametrize("text", ["", "gpu", "cuda:x", "cuda:", "cpu,,cpu", "cpu;cuda"])
def test_bad_device_lists(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_devices(text)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("1024", 1024),
        ("4GiB", 4 * 2**30),
        ("500MB", 500 * 2**20),
        ("1.5k", 1536),
        ("2 G", 2 * 2**30),
    ],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "big", "-1G", "1X"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_size(text)


def test_cache_modes() -> None:
    assert parse_cache_mode("ReadWrite") == "readwrite"
    with pytest.raises(argparse.ArgumentTypeError, match="off, read, readwrite"):
        parse_cache_mode("write")
