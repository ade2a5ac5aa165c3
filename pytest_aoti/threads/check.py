"""The threads check: one engine serving several threads at once, against sequential
eager runs.

A deployed engine is often shared by the threads of a server. Inputs the program mutates
belong to each caller, so that is safe; registered buffers the program mutates are state
inside the one engine, which every thread reads and writes: not thread-safe, whatever one
run happens to show.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.utils._pytree as pytree

from pytest_aoti.api import (
    AotiBufferMutationWarning,
    AotiCheckError,
    CheckContext,
    CheckPlan,
    Comparison,
    Finding,
    InputBuilder,
    Outcome,
    Phase,
    Tolerance,
)
from pytest_aoti.threads.feature import THREADS_KIND, ThreadsOptions

if TYPE_CHECKING:
    from pytest_aoti.api import AotiProgram

JOIN_SECONDS = 300.0
"""How long the threads may take in all before the check gives up on them."""


class ThreadsCheck:
    """``threads=K``: one engine serves K threads at once, each on inputs of its own, and
    every thread's results match eager; a program that mutates registered buffers fails."""

    name = "threads"
    phase: Phase = "engine"

    def __init__(self) -> None:
        self._warned: set[str] = set()  # programs warned about, once per session

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        return plan.options.of(ThreadsOptions).threads > 1 and not context.random_ops

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        __tracebackhide__ = True
        program = context.program
        undeclared = program.mutated_buffers and not _declared(plan.mutated_buffers, program)
        if undeclared and program.key not in self._warned:
            self._warned.add(program.key)
            AotiBufferMutationWarning(
                "the program mutates registered buffers "
                f"{{{', '.join(map(repr, sorted(program.mutated_buffers)))}}}: "
                "one engine shared by several threads shares this state and is not "
                "thread-safe; pass the state as an input the program mutates instead"
            ).issue()
        stats = check_threads(
            context,
            context.local_engine() if not program.mutated_buffers else context.fresh_engine(),
            plan.module,
            *plan.input_sets[0],
            threads=plan.options.of(ThreadsOptions).threads,
            calls=context.calls,
            tolerance=plan.tolerance,
        )
        return Outcome(stats=tuple(stats))


def _declared(declared: Any, program: AotiProgram) -> bool:
    """The test named every buffer the program mutates (``mutated_buffers=``): it knows."""
    return (
        declared is not None
        and not isinstance(declared, str)
        and set(declared) >= set(program.mutated_buffers)
    )


def check_threads(
    context: CheckContext,
    engine: Any,
    module: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    threads: int,
    calls: int,
    tolerance: Tolerance,
) -> list[tuple[str, Comparison.LeafStats]]:
    """Run ``engine`` (in its exported state) from ``threads`` threads at once, each on inputs of its own for
    ``calls`` calls, and compare every thread's outputs and inputs after each call with
    eager run on the same inputs, one thread's calls after another's."""
    __tracebackhide__ = True
    program = context.program
    thread_inputs = [_inputs_for(index, program, args, kwargs) for index in range(threads)]
    expected = [
        context.call_history(module, *inputs, calls, eager=True) for inputs in thread_inputs
    ]
    results: list[list[tuple[Any, dict[str, Any]]]] = [[] for _ in range(threads)]
    errors: list[BaseException | None] = [None] * threads
    start = threading.Barrier(threads)

    def serve(index: int) -> None:
        try:
            results[index] = context.call_history(
                engine, *thread_inputs[index], calls, ready=start.wait
            )
        except BaseException as error:  # reported below, on the test's own thread
            errors[index] = error

    workers = [threading.Thread(target=serve, args=(index,)) for index in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(JOIN_SECONDS)

    scalars = program.scalar_output_dtypes
    difference = _first_difference(expected, results, errors, tolerance, scalars)
    buffers = sorted(program.mutated_buffers)
    if buffers:
        raise AotiCheckError(_unsafe_state(buffers, threads, difference))
    if isinstance(difference, AotiCheckError):
        raise difference
    if isinstance(difference, str):
        raise AotiCheckError(
            Finding(kind=THREADS_KIND, location="", summary="", message=difference)
        )
    return [
        (f"thread {index + 1}", leaf)
        for index, leaf in _all_stats(expected, results, tolerance, scalars)
    ]


def _inputs_for(
    index: int, program: AotiProgram, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Thread 0 gets the example; the others floating inputs of their own values (same
    shapes and ranges), so that a thread reading another's data shows up. Integer inputs
    (positions, indices, masks) stay as given: other values could be out of range."""

    inputs = InputBuilder.clone_tree((tuple(args), dict(kwargs)))
    if index == 0:
        return inputs  # type: ignore[no-any-return]

    def fresh(leaf: Any) -> Any:
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
            return InputBuilder.distinct_like(leaf, seed=1000 + index)
        return leaf

    new_args, new_kwargs = pytree.tree_map(fresh, inputs)
    return tuple(new_args), dict(new_kwargs)


def _first_difference(
    expected: list[list[tuple[Any, dict[str, Any]]]],
    results: list[list[tuple[Any, dict[str, Any]]]],
    errors: list[BaseException | None],
    tolerance: Tolerance,
    scalar_dtypes: Sequence[Any],
) -> AotiCheckError | str | None:
    for index, error in enumerate(errors):
        if error is not None:
            return f"thread {index + 1} of {len(errors)} raised {type(error).__name__}: {error}"
    for index, (want, got) in enumerate(zip(expected, results)):
        if len(got) != len(want):
            return f"thread {index + 1} of {len(results)} did not finish its calls in time"
        try:
            _compare_thread(index, len(results), want, got, tolerance, scalar_dtypes)
        except AotiCheckError as error:
            return error
    return None


def _compare_thread(
    index: int,
    threads: int,
    want: list[tuple[Any, dict[str, Any]]],
    got: list[tuple[Any, dict[str, Any]]],
    tolerance: Tolerance,
    scalar_dtypes: Sequence[Any] = (),
) -> list[Comparison.LeafStats]:
    __tracebackhide__ = True
    stats = []
    for call, ((eager_out, eager_inputs), (engine_out, engine_inputs)) in enumerate(
        zip(want, got), start=1
    ):
        context = f"thread {index + 1} of {threads}, call {call} of {len(want)}"
        stats += Comparison(tolerance).trees(
            eager_out,
            engine_out,
            what="output",
            context=context,
            scalar_dtypes=scalar_dtypes,
        )
        for name, value in engine_inputs.items():
            if hasattr(value, "dtype"):
                stats.append(
                    Comparison(tolerance).leaf(
                        eager_inputs[name],
                        value,
                        location=f"input '{name}'",
                        context=context,
                    )
                )
    return stats


def _all_stats(
    expected: list[list[tuple[Any, dict[str, Any]]]],
    results: list[list[tuple[Any, dict[str, Any]]]],
    tolerance: Tolerance,
    scalar_dtypes: Sequence[Any],
) -> list[tuple[int, Comparison.LeafStats]]:
    return [
        (index, leaf)
        for index, (want, got) in enumerate(zip(expected, results))
        for leaf in _compare_thread(index, len(results), want, got, tolerance, scalar_dtypes)
    ]


def _unsafe_state(
    buffers: list[str], threads: int, difference: AotiCheckError | str | None
) -> Finding:
    names = ", ".join(repr(name) for name in buffers)
    if isinstance(difference, AotiCheckError):
        seen = f"seen here: {difference.finding.headline(stage=False)}"
    elif isinstance(difference, str):
        seen = f"seen here: {difference}"
    else:
        seen = "this run happened to match eager; the race is there all the same"
    return Finding(
        kind=THREADS_KIND,
        location=f"buffer{'s' if len(buffers) > 1 else ''} {names}",
        phrase=f"make{'' if len(buffers) > 1 else 's'} the program not thread-safe",
        summary=f"one engine serving {threads} threads shares this state between them",
        details=(
            "every thread's call reads and writes the engine's registered buffers",
            seen,
        ),
        notes=(
            "pass the state as an input the program mutates (each caller owns its tensor), "
            "or give each thread an engine of its own",
        ),
        extra={"buffers": buffers, "threads": threads},
    )
