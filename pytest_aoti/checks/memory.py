"""Device memory an engine call allocates beyond what was allocated before it.

The motivating use of input mutation is updating a small part of a large tensor (a KV
cache) without a copy: an engine that allocates a copy of the cache for each call is
correct but defeats that. CUDA's allocator keeps exact peak figures; the CPU has nothing
comparable (the process's resident size moves with the allocator's caching), so there it
is not measured.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


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
        import torch

        torch.cuda.synchronize(self.device)
        before = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        yield
        torch.cuda.synchronize(self.device)
        extra = torch.cuda.max_memory_allocated(self.device) - before
        self.peak_bytes = max(self.peak_bytes, extra)
