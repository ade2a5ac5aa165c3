"""A child answering in lines (the engine child, the C++ loader's runner): lines written without
waiting arrive together, none is lost; the bytes a line announces are read whole, within a
deadline; a stopped child says why; the end of its input ends it."""

from __future__ import annotations

import signal
import sys
import textwrap

from pytest_aoti.isolation.line_child import LineChild


def _child(script: str, close_wait: float = 5.0) -> LineChild:
    child = LineChild("test", close_wait)
    child.start([sys.executable, "-c", textwrap.dedent(script)])
    return child


# the child's helpers: write bytes at once, wait for the test's go-ahead line
_PRELUDE = """
import sys, time
out = sys.stdout.buffer
def say(data):
    out.write(data)
    out.flush()
def wait():
    sys.stdin.readline()
"""


def test_lines_that_arrive_in_one_read_are_each_answered() -> None:
    child = _child(
        _PRELUDE + """say(b'{"done": 1}\\n{"done": 2}\\n{"do'); wait(); say(b'ne": 3}\\n')"""
    )
    try:
        assert child.line(10.0) == b'{"done": 1}\n'
        assert child.line(1.0) == b'{"done": 2}\n'
        assert child.line(0.05) is None, "the third line is not whole yet"
        assert child.write(b"go\n")
        assert child.line(10.0) == b'{"done": 3}\n'
        assert child.line(10.0) == b"", "the end of the pipe"
    finally:
        child.close()


def test_the_bytes_a_line_announces_are_read_whole_over_many_reads() -> None:
    size = 256 * 1024  # more than a pipe holds: read while it is written
    child = _child(
        _PRELUDE
        + textwrap.dedent(f"""
        payload = bytes(range(256)) * 1024
        say(b'{{"bytes": {size}}}\\n' + payload[:100])
        for start in range(100, {size}, 50_000):
            time.sleep(0.01)
            say(payload[start : start + 50_000])
        say(b'{{"done": 1}}\\n')
        """)
    )
    try:
        assert child.line(10.0) == b'{"bytes": %d}\n' % size
        assert child.exactly(size, 10.0) == bytes(range(256)) * 1024
        assert child.line(5.0) == b'{"done": 1}\n', "the line after them is whole"
    finally:
        child.close()


def test_bytes_late_are_none_and_kept_those_cut_short_are_what_came() -> None:
    child = _child(_PRELUDE + """say(b"abc"); wait(); say(b"de"); wait(); say(b"fg\\nhi")""")
    try:
        assert child.exactly(5, 0.5) is None, "two bytes are still to come"
        assert child.write(b"go\n")
        assert child.exactly(5, 10.0) == b"abcde", "what came before the time ran out is kept"
        assert child.write(b"go\n")
        assert child.line(10.0) == b"fg\n"
        assert child.exactly(1, 1.0) == b"h", "from what the line's read brought"
        assert child.exactly(5, 10.0) == b"i", "the end of the pipe: what came"
    finally:
        child.close()


def test_a_stopped_child_says_why_from_the_line_it_wrote_last() -> None:
    child = _child(
        "import sys; sys.stderr.write('earlier\\nthe reason it stopped\\n'); sys.exit(3)"
    )
    try:
        assert child.line(10.0) == b"", "it stopped without an answer"
        assert child.exit_and_last_line() == (3, "the reason it stopped")
        assert not child.running
        assert child.exit_and_last_line(start=len("earlier\n")) == (3, "the reason it stopped")
        written = len("earlier\nthe reason it stopped\n")
        assert child.exit_and_last_line(start=written) == (3, ""), "nothing from there on"
    finally:
        child.close()


def test_the_end_of_its_input_ends_a_child_and_one_that_stays_is_killed() -> None:
    child = _child(_PRELUDE + "wait()")
    process = child.process
    assert process is not None and child.running
    child.close()
    assert process.poll() == 0, "it read the end of its input and exited"
    assert not child.write(b"late\n"), "nothing is written to a closed child"
    # it ignores SIGTERM too: only the kill ends it
    stays = _child(
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)",
        close_wait=0.2,
    )
    assert stays.line(10.0) == b"ready\n"
    process = stays.process
    assert process is not None
    stays.close(wait=False)  # returns at once: a thread of its own waits for the kill
    assert process.wait(timeout=10) == -signal.SIGKILL, "killed once its time to exit ran out"
