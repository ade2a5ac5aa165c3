"""What else kept the machine busy while a benchmark ran (``/proc/stat``, Linux)."""

from __future__ import annotations

import os
from pathlib import Path


def machine_busy_seconds() -> float | None:
    """CPU seconds the whole machine has been busy since boot; None where unknown."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq = (int(value) for value in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")
