"""The Hypothesis search of generated shapes: the shapes drawn first, without a call, then run
in batches (one engine-child request per batch, eager meanwhile); only where one fails is the
same search (the same seed) run again shape by shape, so Hypothesis sees the failure and
shrinks it."""

from __future__ import annotations

import unittest
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import hypothesis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase, ReadOnlyDatabase

if TYPE_CHECKING:
    from pytest_aoti.api import AotiProgram, ProgramShapes


@dataclass(frozen=True)
class Generation:
    """How to generate: how many examples, the size cap, where Hypothesis keeps failures."""

    examples: int
    max_dim: int
    database: Path | None = None
    """Hypothesis example database (in pytest's cache dir): a failing shape is tried first
    on the next run."""
    label: str = ""
    """What distinguishes this check's saved examples from other checks' (the test id)."""


class ShapeFailure(Exception):
    """A generated input set failed; carries what is needed to report it."""

    def __init__(self, values: dict[str, int], seed: int, error: BaseException) -> None:
        super().__init__(str(error))
        self.values = values
        self.seed = seed
        self.error = error
        self.boundary = False
        """Found at an exported boundary, not drawn by Hypothesis."""
        self.rerun: str | None = None
        """How to run the search that found it again (``--hypothesis-seed=...``)."""


class ShapeRunner(Protocol):
    """What the search runs its shapes with (the generated check's shape checker)."""

    program: AotiProgram

    def run_ahead(self, drawn: list[tuple[dict[str, int], int]]) -> bool:
        """Run every drawn shape; True when all passed, False (none counted) else."""

    def run(self, values: dict[str, int], seed: int) -> None:
        """Run one shape; raise :class:`ShapeFailure` where it fails."""


def search_shapes(
    checker: ShapeRunner, generation: Generation, shapes: ProgramShapes
) -> ShapeFailure | None:
    """The Hypothesis search: its shapes drawn first, without a call, then run in batches
    (one child request per batch); only where one fails is the same search (the same seed)
    run again shape by shape, so Hypothesis finds the failure and shrinks it."""
    if generation.examples <= 0:
        return None
    database = DirectoryBasedExampleDatabase(generation.database) if generation.database else None
    drawn: list[tuple[dict[str, int], int]] = []
    drawing = _hypothesis_search(
        lambda values, seed: drawn.append((dict(values), seed)),
        generation,
        shapes,
        checker.program.key,
        # the saved failures are replayed first, and kept until the search runs them
        ReadOnlyDatabase(database) if database is not None else None,
    )
    try:
        drawing()
    except (pytest.skip.Exception, unittest.SkipTest):
        # a profile that generates nothing (phases without generate, and nothing saved to
        # replay) makes Hypothesis skip: the search is empty, the user's test goes on
        return None
    if checker.run_ahead(drawn):
        return None
    drawn_seed = getattr(drawing, "_hypothesis_internal_use_generated_seed", None)
    last: list[ShapeFailure] = []

    def run(values: dict[str, int], seed: int) -> None:
        try:
            checker.run(values, seed)
        except ShapeFailure as failure:
            last[:] = [failure]
            raise

    search = _hypothesis_search(run, generation, shapes, checker.program.key, database)
    if drawn_seed is not None:  # the seed the drawing took: the same shapes, in order
        search._hypothesis_internal_use_seed = drawn_seed
    try:
        search()
    except ShapeFailure:
        # Hypothesis re-runs the shrunk example last, so ``last`` holds the smallest
        failure = last[0]
        failure.rerun = _rerun_hint(drawn_seed)
        return failure
    except (pytest.skip.Exception, unittest.SkipTest):
        return None
    # the shapes did not fail one at a time (a flaky engine): the batch's failure is reported
    return _first_failure(checker, drawn)


def _first_failure(
    checker: ShapeRunner, drawn: list[tuple[dict[str, int], int]]
) -> ShapeFailure | None:
    """The first drawn shape that fails run alone, unshrunk (None: none does)."""
    for values, seed in drawn:
        try:
            checker.run(values, seed)
        except ShapeFailure as failure:
            failure.rerun = "replay: run the test again (the shape failed in a batch only)"
            return failure
    return None


def _hypothesis_search(
    body: Callable[[dict[str, int], int], None],
    generation: Generation,
    shapes: ProgramShapes,
    program_key: str,
    database: Any,
) -> Any:
    """A Hypothesis test of ``body`` over the generated shapes (a size per shape symbol, a
    values seed); every search of one check and program has the same database key."""

    # the active profile (the user's) applies; only the example count, the deadline (an
    # engine call has no stable duration) and the database are ours
    @settings(
        max_examples=generation.examples,
        deadline=None,
        database=database,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )
    @given(values=shapes.assignments(generation.max_dim), seed=st.integers(0, 2**32 - 1))
    def generated_shapes(values: dict[str, int], seed: int) -> None:
        body(values, seed)

    inner = generated_shapes.hypothesis.inner_test  # type: ignore[attr-defined]
    inner._hypothesis_internal_add_digest = f"{generation.label}|{program_key}".encode()
    return generated_shapes


def _rerun_hint(drawn_seed: int | None) -> str:
    """How to run the same search again: the seed Hypothesis drew for it (or
    ``--hypothesis-seed``'s) replays it."""
    seed = hypothesis.core.global_force_seed
    if seed is None:
        seed = drawn_seed
    if seed is None:  # a derandomizing profile, e.g. Hypothesis' "ci" profile
        return "replay: run the test again (the Hypothesis profile derandomizes the search)"
    return f"replay: pytest <this test> --hypothesis-seed={seed}"
