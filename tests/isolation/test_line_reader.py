"""The engine child's answers: lines written without waiting arrive together, none is lost."""

from __future__ import annotations

import os

from pytest_aoti.isolation.process import LineReader


def test_lines_that_arrive_in_one_read_are_each_answered() -> None:
    read, write = os.pipe()
    with os.fdopen(read, "rb") as stream:
        reader = LineReader(stream)
        os.write(write, b'{"done": 1}\n{"done": 2}\n{"do')
        assert reader.line(1.0) == b'{"done": 1}\n'
        assert reader.line(1.0) == b'{"done": 2}\n'
        assert reader.line(0.05) is None, "the third line is not whole yet"
        os.write(write, b'ne": 3}\n')
        assert reader.line(1.0) == b'{"done": 3}\n'
        os.close(write)
        assert reader.line(1.0) == b"", "the end of the pipe"
