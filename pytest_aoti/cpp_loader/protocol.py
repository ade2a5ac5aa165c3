"""The runner's line protocol (see :file:`runner.cpp`): one request per line, fields separated
by tabs; one answer per line, ``ok`` and ``name=value`` fields, or ``error``, the stage and
the message. Pure text, no torch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

READY = "ready"
"""The runner's first line, once torch's libraries are loaded."""


class ProtocolError(ValueError):
    """A request that cannot be written, or an answer that cannot be read."""


@dataclass(frozen=True)
class Answer:
    """One answer: ``ok`` with its fields, or an error at ``stage`` with its ``message``."""

    ok: bool
    fields: dict[str, str] = field(default_factory=dict)
    stage: str = ""
    message: str = ""

    def number(self, name: str) -> float:
        """Field ``name`` as a number; :class:`ProtocolError` where it is not one."""
        try:
            return float(self.fields[name])
        except (KeyError, ValueError):
            raise ProtocolError(f"the runner's answer has no number {name}=") from None


def _line(words: Sequence[str]) -> str:
    for word in words:
        if "\t" in word or "\n" in word or "\r" in word:
            raise ProtocolError(f"a request field holds a tab or a line end: {word!r}")
    return "\t".join(words) + "\n"


def set_request(threads: int, flush_denormal: bool, matmul_precision: str) -> str:
    """Set the runner's threads, denormal flushing and float32 matmul precision."""
    if threads < 1:
        raise ProtocolError(f"threads must be at least 1, got {threads}")
    return _line(["set", str(threads), "1" if flush_denormal else "0", matmul_precision])


def lib_request(path: Path | str) -> str:
    """Load a custom-op library into the runner."""
    return _line(["lib", str(path)])


def run_request(
    package: Path | str,
    inputs: Path | str,
    outputs: Path | str,
    *,
    runners: int,
    fresh: bool,
    device: str = "cpu",
) -> str:
    """Run ``package`` (loaded again where ``fresh`` or another package was loaded last) on
    the tensors in ``inputs``, moved to ``device``; its outputs, then its inputs after the
    call, to ``outputs``."""
    if runners < 1:
        raise ProtocolError(f"runners must be at least 1, got {runners}")
    fresh_field = "1" if fresh else "0"
    return _line(
        ["run", str(package), str(inputs), str(outputs), str(runners), fresh_field, device]
    )


def parse_answer(line: str | bytes) -> Answer:
    """One answer line; :class:`ProtocolError` where it is neither ``ok`` nor ``error``."""
    text = line.decode(errors="replace") if isinstance(line, bytes) else line
    text = text.rstrip("\r\n")
    head, *rest = text.split("\t")
    if head == "ok":
        fields: dict[str, str] = {}
        for item in rest:
            name, equals, value = item.partition("=")
            if not equals or not name:
                raise ProtocolError(f"the runner answered a field without a name: {item!r}")
            fields[name] = value
        return Answer(True, fields)
    if head == "error" and rest:
        return Answer(False, stage=rest[0], message="\t".join(rest[1:]).strip())
    raise ProtocolError(f"the runner answered {text[:200]!r}")
