"""The engine child's answers: lines written without waiting arrive together, none is lost;
the bytes a line announces are read whole, within a deadline."""

from __future__ import annotations

import os
import threading
import time

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


def test_the_bytes_a_line_announces_are_read_whole_over_many_reads() -> None:
    payload = bytes(range(256)) * 1024  # more than a pipe holds: read while it is written
    read, write = os.pipe()

    def child() -> None:
        os.write(write, b'{"bytes": %d}\n' % len(payload) + payload[:100])
        for start in range(100, len(payload), 50_000):
            time.sleep(0.01)
            os.write(write, payload[start : start + 50_000])
        os.write(write, b'{"done": 1}\n')

    writer = threading.Thread(target=child)
    writer.start()
    try:
        with os.fdopen(read, "rb") as stream:
            reader = LineReader(stream)
            assert reader.line(5.0) == b'{"bytes": %d}\n' % len(payload)
            assert reader.exactly(len(payload), 5.0) == payload
            assert reader.line(5.0) == b'{"done": 1}\n', "the line after them is whole"
    finally:
        writer.join()
        os.close(write)


def test_bytes_late_are_none_and_kept_those_cut_short_are_what_came() -> None:
    read, write = os.pipe()
    with os.fdopen(read, "rb") as stream:
        reader = LineReader(stream)
        os.write(write, b"abc")
        assert reader.exactly(5, 0.05) is None, "two bytes are still to come"
        os.write(write, b"de")
        assert reader.exactly(5, 1.0) == b"abcde", "what came before the time ran out is kept"
        os.write(write, b"fg\nhi")
        assert reader.line(1.0) == b"fg\n"
        assert reader.exactly(1, 1.0) == b"h", "from what the line's read brought"
        os.close(write)
        assert reader.exactly(5, 1.0) == b"i", "the end of the pipe: what came"
