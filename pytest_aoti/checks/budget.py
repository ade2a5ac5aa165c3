"""How deep a check's searches beyond the example go (values draws, deployment probes,
generated shapes, weight sets, the C++ loader's input sets): counts decided before the first
item from the program's size alone, never from the clock, so the same test runs the same
searches on a quiet and a loaded machine, under ``-n`` and alone. Pure logic without torch.

A program below :data:`LARGE_FROM_BYTES` (its weights and its example's inputs) runs every
default search in full. A larger one's searches together read at most
:data:`READ_ALLOWANCE_BYTES` (scaled by the ``budget`` option against its default): each
item reads the program's bytes once per call, and a search that loads the package again
(probes, weight sets, the C++ loader) reads them once more. The searches take from it in
the order they run; what a run leaves out, a later run of the same test and program
continues (each search keeps the items that ran with the package). A count the user gives
is never shortened, and ``budget="off"`` runs every default in full."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_aoti.options.check_options import DEFAULT_SHARE

LARGE_FROM_BYTES = 2**25
"""Program bytes (weights and the example's inputs) from which the default searches are
shortened to :data:`READ_ALLOWANCE_BYTES`: below it every default search runs in full."""
READ_ALLOWANCE_BYTES = 5 * 2**28
"""Bytes the searches of one check of a large program may read in all at the default
budget (1.25 GiB: two values draws of a 135M-parameter float32 model, a twentieth of its
compile here)."""


@dataclass
class Spent:
    """What one search planned, ran and left for later runs."""

    ran: int
    planned: int
    stopped: str = ""
    """``"budget"`` when the check budget left items of it for later runs, ``"off"`` when
    it left them all to ``budget="off"`` (a large program's search that loads it again and
    continues on no later run), else ``""``."""
    given: bool = False
    """Its count came from the user (never shortened)."""
    earlier: int = 0
    """Items earlier runs of this test and program ran (not run again)."""
    left: int = 0
    """Items no run has reached yet: the next run of this test and program runs them."""
    runs: int = 0
    """Runs of this test and program that ran items of it, this one included."""
    why: str = ""
    """A rule that set the count (a cap, the meeting draws, the user's count over a cap)."""

    def to_json(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if key != "why" or value}


@dataclass
class CheckBudget:
    """What the searches of one check may read, and what each planned and ran."""

    share: float | None = None
    """The ``budget`` option (None or infinite: off)."""
    program_bytes: int = 0
    """The program's weights and its example's inputs, in bytes."""
    calls: int = 1
    """Calls per input set: an item reads the program once per call."""
    reserved: int = 0
    """Bytes the searches planned so far have taken of the allowance."""
    checks: dict[str, Spent] = field(default_factory=dict)

    @classmethod
    def of(cls, share: float | None, program_bytes: int, calls: int = 1) -> CheckBudget:
        """The budget of a check whose program (weights and example) holds ``program_bytes``."""
        return cls(share, max(0, program_bytes), max(1, calls))

    @property
    def off(self) -> bool:
        """``budget="off"``: every default runs in full."""
        return self.share is None or math.isinf(self.share)

    @property
    def limited(self) -> bool:
        """Whether the default searches are shortened: a large program, a budget set."""
        return not self.off and self.program_bytes >= LARGE_FROM_BYTES

    @property
    def allowance(self) -> int | None:
        """Bytes the searches may read in all (None: no limit)."""
        if not self.limited:
            return None
        assert self.share is not None
        return int(READ_ALLOWANCE_BYTES * self.share / DEFAULT_SHARE)

    def plan(
        self,
        search: str,
        planned: int,
        *,
        earlier: int = 0,
        floor: int = 0,
        given: bool = False,
        loads: bool = False,
        runs: int = 0,
        why: str = "",
        calls: int | None = None,
    ) -> int:
        """How many items ``search`` runs now, of the ``planned - earlier`` no run has run:
        all where ``given`` (the user's count), without a limit or on a small program;
        else as many as the allowance left holds (each item ``calls`` reads of the program,
        the check's :attr:`calls` unless given: a decode loop's item reads it once per step;
        plus one read where ``loads``: the package loaded again), at least ``floor``. Says so
        in :attr:`checks`; :meth:`ran` then says how many ran."""
        pending = max(0, planned - earlier)
        count = pending
        if self.limited and not given and pending:
            allowance = self.allowance or 0
            item = max(1, self.program_bytes * (calls or self.calls))
            load = self.program_bytes if loads else 0
            room = max(0, allowance - self.reserved - load) // item
            count = min(pending, max(floor, room))
            if count:
                self.reserved += count * item + load
        self.checks[search] = Spent(
            ran=0,
            planned=planned,
            stopped="budget" if count < pending else "",
            given=given,
            earlier=earlier,
            left=pending - count,
            runs=runs + (1 if count else 0),
            why=why,
        )
        return count

    def left_out(self, search: str, planned: int) -> None:
        """``search`` runs none of its ``planned`` items on this large program: each would
        load it again; ``budget="off"`` runs them (no later run does)."""
        self.checks[search] = Spent(0, planned, stopped="off", left=planned)

    def ran(self, search: str, ran: int) -> None:
        """``search`` ran ``ran`` items this run (fewer than planned: a failure ended it)."""
        spent = self.checks.get(search)
        if spent is None:
            self.checks[search] = Spent(ran, ran)
        else:
            spent.ran = ran

    def to_json(self) -> dict[str, Any]:
        allowance = self.allowance
        return {
            "share": "off" if self.off else self.share,
            "program_bytes": self.program_bytes,
            "allowance_bytes": allowance,
            "checks": {name: item.to_json() for name, item in self.checks.items()},
        }


def left_by_search(budget: Any, stopped: str = "budget") -> dict[str, int]:
    """Items by search a record's ``budget`` field left for later runs (``stopped="off"``:
    to ``budget="off"``); none: ``{}``."""
    checks = budget.get("checks") if isinstance(budget, dict) else None
    if not isinstance(checks, dict):
        return {}
    left = {}
    for name, item in checks.items():
        if isinstance(item, dict) and item.get("stopped") == stopped:
            count = item.get("left")
            if isinstance(count, int) and count > 0:
                left[name] = count
    return left
