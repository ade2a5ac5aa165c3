"""Ending the compiler processes a compile of this process started, on an interrupt: on Ctrl-C
``subprocess.run`` kills ``g++`` but not ``cc1plus``/``as``/``ld`` below it. Only descendants are
ended, by pid (a process group may hold pytest or the xdist controller). Linux only (``/proc``)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

COMPILER_NAMES = frozenset(
    {"cc", "c++", "gcc", "g++", "cc1", "cc1plus", "as", "ld", "collect2", "clang", "clang++",
     "nvcc", "cicc", "ptxas", "fatbinary", "nvlink", "ld.lld", "ld.gold", "ld.bfd"}
)  # fmt: skip
"""The command names (``/proc/PID/comm``) of the compilers, assemblers and linkers."""


def descendants(pid: int) -> dict[int, str]:
    """Every living descendant of process ``pid``, with its command name."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = entry.read_text()
        except OSError:
            continue  # ended while being read
        # "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses
        head, _, rest = text.rpartition(")")
        child = int(head.split(" (", 1)[0])
        names[child] = head.split(" (", 1)[1]
        children.setdefault(int(rest.split()[1]), []).append(child)
    found: dict[int, str] = {}
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        if child not in found:
            found[child] = names.get(child, "")
            todo += children.get(child, [])
    return found


def end_compilers(pid: int | None = None) -> list[int]:
    """SIGKILL every compiler process below ``pid`` (default: this one); the pids. Never raises."""
    ended: list[int] = []
    try:
        below = descendants(os.getpid() if pid is None else pid)
    except (OSError, ValueError, IndexError):
        return ended
    for child, name in below.items():
        if name in COMPILER_NAMES:
            try:
                os.kill(child, signal.SIGKILL)  # a compile asked to stop has nothing to save
            except OSError:
                continue
            ended.append(child)
    return ended
