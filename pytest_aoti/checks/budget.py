"""The check budget: the searches beyond the example (values draws, deployment probes, generated
shapes, and any check that takes from it) share seconds set by the program's compile, as
recorded with its package, so the same package gets the same budget on every run and on every
machine load; a check that spends it stops after its floor and says so. Pure logic without
torch."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

MINIMUM_SECONDS = 1.0
"""The least budget of a small package: what a small model's searches take in all, so that
it keeps every draw, probe and shape (a share of a few seconds' compile would cut them)."""
SHARE_ALONE_FROM_BYTES = 2**25
"""Package bytes from which the budget is the share alone, with no least: a large model's
draws cost tens of milliseconds each, so a least set for small ones would be most of what
its check adds to the compile (the engine child's threshold, ``SERVED_FROM_BYTES``)."""


@dataclass
class Spent:
    """What one check ran of what it planned, and why it stopped."""

    ran: int
    planned: int
    stopped: str = ""
    """``"budget"`` when the budget ended it early, else ``""``."""


@dataclass
class CheckBudget:
    """Seconds the searches of one check may take in all (None: no limit)."""

    seconds: float | None
    share: float | None = None
    compile_seconds: float = 0.0
    spent: float = 0.0
    checks: dict[str, Spent] = field(default_factory=dict)
    per_input_set: float | None = None
    """Seconds one input set cost a search so far (eager, the engine, the comparison): what
    a later search estimates its cost from."""
    least: float = 0.0
    """The least the budget was raised to (:data:`MINIMUM_SECONDS`), 0 where none applied."""

    @classmethod
    def of(cls, share: float | None, compile_seconds: float, package_bytes: int = 0) -> CheckBudget:
        """``share`` of ``compile_seconds``, at least :data:`MINIMUM_SECONDS` for a package
        below :data:`SHARE_ALONE_FROM_BYTES`; no limit for an infinite share (``off``) or an
        entry without a recorded compile time."""
        if share is None or math.isinf(share) or compile_seconds <= 0:
            return cls(None, share, compile_seconds)
        least = MINIMUM_SECONDS if package_bytes < SHARE_ALONE_FROM_BYTES else 0.0
        return cls(max(share * compile_seconds, least), share, compile_seconds, least=least)

    def left(self) -> float | None:
        """Seconds left (never below 0); None without a limit."""
        return None if self.seconds is None else max(0.0, self.seconds - self.spent)

    def allows(self, done: int, floor: int) -> bool:
        """Whether a search that ran ``done`` of its runs goes on: always below ``floor``."""
        return done < floor or self.seconds is None or self.spent < self.seconds

    def fits(self, seconds: float) -> bool:
        """Whether ``seconds`` more fit in what is left."""
        left = self.left()
        return left is None or seconds <= left

    @contextmanager
    def spending(self) -> Iterator[None]:
        """Count the seconds of the block as spent."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.spent += time.perf_counter() - started

    def charge(self, seconds: float) -> None:
        """Count ``seconds`` an earlier run spent on what this run keeps (draws it does not
        run again) as spent: a later run of a package adds only what its budget left."""
        self.spent += max(0.0, seconds)

    def ran(self, check: str, ran: int, planned: int) -> None:
        """``check`` ran ``ran`` of its ``planned`` runs (fewer: the budget stopped it)."""
        self.checks[check] = Spent(ran, planned, "budget" if ran < planned else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "share": "off" if self.share is not None and math.isinf(self.share) else self.share,
            "seconds": None if self.seconds is None else round(self.seconds, 3),
            "compile_seconds": round(self.compile_seconds, 3),
            "spent": round(self.spent, 3),
            "checks": {
                name: {"ran": item.ran, "planned": item.planned, "stopped": item.stopped}
                for name, item in self.checks.items()
            },
        }

    def cut_short(self) -> str:
        """The cost hint of the checks the budget stopped early ("" when none)."""
        cut = [
            f"{name} ran {item.ran} of {item.planned}"
            for name, item in self.checks.items()
            if item.stopped == "budget"
        ]
        if not cut or self.seconds is None or self.share is None:
            return ""
        least = f"at least {self.least:g} s: " if self.least else ""
        return (
            f"the check budget ({self.share:.0%} of the {self.compile_seconds:.1f} s compile, "
            f"{least}{self.seconds:.1f} s) cut {', '.join(cut)}; "
            "budget=off (or --aoti-budget=off) runs them all"
        )
