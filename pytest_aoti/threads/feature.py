"""The threads check, declared: its option. Pure data without torch."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_aoti.api import Feature, FindingKind, ValueKind, per_check


@dataclass(frozen=True)
class ThreadsOptions:
    """The per-check option of the threads check."""

    threads: int = per_check(
        1,
        "Threads one engine serves at once in the thread-safety check (1: no such check).",
        check=ValueKind.COUNT.check,
        keyword=True,
    )


THREADS_KIND = FindingKind("threads")
"""The kind of this feature's failures (its ``Feature``'s ``kinds`` say what it means)."""


THREADS = Feature(
    "threads",
    "Threads: one engine serving several threads at once, each thread's results against eager",
    options=ThreadsOptions,
    kinds={THREADS_KIND: "one engine shared by threads differs from sequential eager"},
)
