"""How fast the engine runs next to eager: median call times, and a profiler trace.

Both run on fresh clones of the check's first input set, after the check passed (the
last check of the list), so inputs the program mutates never reach the caller; on CUDA
every timed call is synchronized.
"""

from __future__ import annotations

import os
import statistics
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from pytest_aoti.api import (
    AotiProgram,
    CheckContext,
    CheckPlan,
    InputBuilder,
    Outcome,
    Phase,
    RecordPart,
)

if TYPE_CHECKING:
    from pytest_aoti.api import AotiProgram

TIMED_CALLS = 3
"""Calls timed per side at most: enough for a median, cheap for a big model."""

TIMING_BUDGET_SECONDS = 0.02
"""Stop timing a side once its calls took this long: on a busy machine a small model's call
can wait tens of milliseconds on a descheduled OpenMP thread, and more calls would only
multiply that."""

PROFILE_SCHEDULE = {"wait": 1, "warmup": 2, "active": 5, "repeat": 1}
"""``torch.profiler.schedule`` of the traces: one call skipped, two warm-up, five recorded."""


class TimingCheck:
    """Engine and eager call times, and the profiler trace where one was asked for.

    A measurement, not a verdict: it never fails a check. What went wrong measuring is the
    figure ``measure_error``; the figures are ``engine_seconds``, ``eager_seconds``,
    ``load`` (the load average per CPU when timed) and ``profile`` (the trace's path).
    """

    name = "timing"
    figures = ("engine_seconds", "eager_seconds", "load", "profile", "measure_error")
    """The figures its outcome reports (the :class:`~pytest_aoti.CheckResult`'s names)."""
    phase: Phase = "engine"

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        return True

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        args, kwargs = plan.input_sets[0]
        figures: dict[str, Any] = {}
        try:
            program = context.program
            # timed where the engine ran the example (the engine child), else here
            measured = context.measured_seconds(args, kwargs)
            engine = None if measured is not None else context.local_engine()
            figures["engine_seconds"], figures["eager_seconds"] = call_times(
                program, engine, plan.module, args, kwargs
            )
            if measured is not None:
                figures["engine_seconds"] = measured
            figures["load"] = machine_load()
            path = context.profile_path()
            if path is not None:
                engine = context.local_engine()
                figures["profile"] = str(write_profile(path, program, engine, args, kwargs))
        except Exception as problem:  # a measurement must never fail a passed check
            figures["measure_error"] = f"{type(problem).__name__}: {problem}"
        load = figures.get("load")
        record = RecordPart(
            {
                "engine_seconds": figures.get("engine_seconds"),
                "eager_seconds": figures.get("eager_seconds"),
                "timing_load": None if load is None else float(load),
                "profile": figures.get("profile"),
            },
            properties=(
                (("aoti_measure_error", figures["measure_error"]),)
                if figures.get("measure_error")
                else ()
            ),
        )
        return Outcome(figures=figures, record=record)


def machine_load() -> float | None:
    """The 1-minute load average per CPU (1.0: every CPU busy), None where unknown."""
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except (AttributeError, OSError):  # not on every platform
        return None


def call_times(
    program: AotiProgram,
    engine: Callable[..., Any] | None,
    module: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> tuple[float, float]:
    """Median seconds of one engine call (0.0 for an ``engine`` of None: not timed here) and
    of one eager call.

    Both were just called by the check, so there is no warm-up call: up to
    :data:`TIMED_CALLS` calls a side, fewer once they took :data:`TIMING_BUDGET_SECONDS`.
    """
    eager = CheckContext.eager_module(module)
    sync = _synchronizer(program.device)

    def timed(function: Callable[..., Any]) -> float:
        inputs_args, inputs_kwargs = InputBuilder.clone_tree((tuple(args), dict(kwargs)))
        samples: list[float] = []
        with torch.no_grad():
            while len(samples) < TIMED_CALLS and sum(samples) < TIMING_BUDGET_SECONDS:
                sync()
                started = time.perf_counter()
                function(*inputs_args, **inputs_kwargs)
                sync()
                samples.append(time.perf_counter() - started)
        return statistics.median(samples)

    return (0.0 if engine is None else timed(engine)), timed(eager)


def write_profile(
    path: Path,
    program: AotiProgram,
    engine: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> Path:
    """A Chrome trace of the engine's calls (CPU activities, and CUDA on a CUDA device).

    Inputs the engine mutates are cloned anew for each call, so every profiled call
    sees the check's own inputs.
    """
    activities = [ProfilerActivity.CPU]
    if program.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    sync = _synchronizer(program.device)
    steps = sum(PROFILE_SCHEDULE[phase] for phase in ("wait", "warmup", "active"))
    path.parent.mkdir(parents=True, exist_ok=True)

    def save(prof: Any) -> None:
        prof.export_chrome_trace(str(path))

    with AotiProgram.quiet_torch_deprecations(), warnings.catch_warnings(), torch.no_grad():
        # torch 2.11 warns "Profiler clears events at the end of each cycle" on the first
        # cycle of any scheduled profile; as an error (filterwarnings = error) it leaves the
        # profiler half prepared and its exit crashes the process
        warnings.filterwarnings("ignore", "Warning: Profiler clears events", UserWarning)
        with profile(
            activities=activities, schedule=schedule(**PROFILE_SCHEDULE), on_trace_ready=save
        ) as prof:
            for _ in range(steps):
                call_args, call_kwargs = InputBuilder.clone_tree((tuple(args), dict(kwargs)))
                with torch.profiler.record_function("aoti_engine_call"):
                    engine(*call_args, **call_kwargs)
                sync()
                prof.step()
    return path


def _synchronizer(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None
