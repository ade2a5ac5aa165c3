"""The core per-check options, as one frozen typed object: :class:`CoreOptions`.

Each field is one per-check option, and its metadata is its row
(:func:`~pytest_aoti.options.fields.per_check`). A feature's per-check options are a class
of its own (``<feature>/feature.py``); :class:`pytest_aoti.features.CheckOptions` composes
this class and theirs, and a check reads ``plan.options.threads``. A new core per-check
option is a field here plus the check that reads it.

Pure logic without torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_aoti.options.fields import per_check
from pytest_aoti.options.values import (
    PRECISION_MODES,
    RANDOM_MODES,
    check_bytes,
    check_count,
    check_switch,
    parse_switch,
)


@dataclass(frozen=True)
class CoreOptions:
    """The per-check options of the core checks (random programs, precision, threads,
    memory, the crash screen, training mode)."""

    random: str = per_check(
        "fail",
        "A program that draws random numbers (dropout in training mode, rand, bernoulli, "
        "...): fail its check, or compare shapes (output shapes and dtypes, and the values "
        "of outputs no random op feeds). Default: fail.",
        parse=RANDOM_MODES.parse,
        check=RANDOM_MODES.check,
        marker=True,
        keyword=True,
    )
    precision: str = per_check(
        "report",
        "Where an output differs from eager beyond its tolerance and the float64 reference "
        "sides with the engine (eager rounds to float16 or bfloat16 where the engine keeps "
        "float32): report it in the record and the summary, or fail the check. "
        "Default: report.",
        parse=PRECISION_MODES.parse,
        check=PRECISION_MODES.check,
        marker=True,
        keyword=True,
    )
    threads: int = per_check(
        1,
        "Threads one engine serves at once in the thread-safety check (1: no such check).",
        check=check_count,
        keyword=True,
    )
    max_extra_bytes: int | None = per_check(
        None,
        "Device memory one engine call of the example may allocate beyond what was "
        "allocated before it (CUDA only; None: not checked).",
        check=check_bytes,
        keyword=True,
    )
    crash_screen: bool = per_check(
        True,
        "Run the check's engine calls once in a child process before the test process "
        "makes them: an engine that crashes its process (a signal, an abort, a sticky CUDA "
        "error) or hangs fails its test and the run goes on. Default: on.",
        parse=parse_switch,
        check=check_switch,
        marker=True,
        keyword=True,
    )
    training: bool = per_check(
        False,
        "Check a module left in training mode on purpose: its BatchNorm-like layers update "
        "their running statistics on every call. False refuses such a module before any "
        "export, with the hint to call model.eval(). Default: False.",
        check=check_switch,
        keyword=True,
    )
