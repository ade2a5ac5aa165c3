"""The memory check: device memory an engine call allocates beyond what was allocated
before it.

The motivating use of input mutation is updating a small part of a large tensor (a KV
cache) without a copy: an engine that allocates a copy of the cache for each call is
correct but defeats that. CUDA's allocator keeps exact peak figures; the CPU has nothing
comparable (the process's resident size moves with the allocator's caching), so there it
is not measured.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from pytest_aoti.api import (
    AotiCheckError,
    CheckContext,
    CheckPlan,
    Finding,
    InputBuilder,
    Outcome,
    Phase,
    RecordPart,
)
from pytest_aoti.memory.feature import MEMORY_KIND, MemoryOptions


class MemoryCheck:
    """``max_extra_bytes=N``: no engine call of the example allocates more than N bytes of
    device memory beyond what was allocated before it (outputs included)."""

    name = "memory"
    figures = ("extra_bytes",)
    """The figures its outcome reports (the :class:`~pytest_aoti.CheckResult`'s names)."""
    phase: Phase = "engine"

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        return plan.options.of(MemoryOptions).max_extra_bytes is not None

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        __tracebackhide__ = True
        memory = PeakMemory(context.device)
        if not memory.measured:  # the record says so: the terminal summary counts these
            unmeasured = {"extra_bytes": None, "extra_bytes_unmeasured": True}
            return Outcome(figures={"extra_bytes": None}, record=RecordPart(unmeasured))

        # the example's calls, only the engine's measured, on the shared engine (the values
        # of its buffers do not change what a call allocates)
        program = context.program
        engine = context.local_engine()
        args, kwargs = InputBuilder.clone_tree(plan.input_sets[0])
        with torch.no_grad():
            for _ in range(context.calls):
                with memory.call():
                    outputs = engine(*args, **kwargs)
                del outputs
        _assert_extra_bytes(memory, plan, program)
        measured = {"extra_bytes": memory.peak_bytes}
        return Outcome(figures=measured, record=RecordPart(measured))


class PeakMemory:
    """The largest extra allocation seen over the engine calls measured with :meth:`call`."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.measured = device.type == "cuda"
        """Whether this device's memory can be measured (CUDA only)."""
        self.peak_bytes = 0

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """Measure one engine call: the peak allocated during it minus what was allocated
        before it (its outputs count: they are allocations too)."""
        if not self.measured:
            yield
            return

        torch.cuda.synchronize(self.device)
        before = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        yield
        torch.cuda.synchronize(self.device)
        extra = torch.cuda.max_memory_allocated(self.device) - before
        self.peak_bytes = max(self.peak_bytes, extra)


def _assert_extra_bytes(memory: PeakMemory, plan: Any, program: Any) -> None:
    """Fail when ``memory``'s measured peak is above ``plan.options.max_extra_bytes``."""
    __tracebackhide__ = True
    limit = plan.options.of(MemoryOptions).max_extra_bytes
    if limit is None or not memory.measured or memory.peak_bytes <= limit:
        return
    mutated = sorted(program.mutated_inputs)
    raise AotiCheckError(
        Finding(
            kind=MEMORY_KIND,
            location="the engine call",
            phrase=f"allocated {memory.peak_bytes:,} bytes of {memory.device} memory",
            summary=f"more than max_extra_bytes={limit:,}",
            details=(
                "measured as the peak allocated during the call minus what was allocated "
                "before it (outputs included), over the example's calls",
                *(
                    [
                        "the program mutates "
                        + ", ".join(repr(name) for name in mutated)
                        + ": an engine that copies a mutated input instead of writing into "
                        "it costs that input's size per call"
                    ]
                    if mutated
                    else []
                ),
            ),
            extra={"extra_bytes": memory.peak_bytes, "max_extra_bytes": limit},
        )
    )
