"""A stand-in for pytest's terminal reporter that keeps the summary's lines: what a plugin's
summary section writes to pytest's ``TerminalReporter``, read back by a test."""

from __future__ import annotations


class SectionLines:
    """Each separator as ``--- title``, each line as it is."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def write_sep(self, sep: str, title: str) -> None:
        self.lines.append(f"--- {title}")

    def write_line(self, line: str) -> None:
        self.lines.append(line)
