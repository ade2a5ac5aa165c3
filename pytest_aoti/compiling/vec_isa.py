"""Inductor's CPU vector ISA (``torch._inductor.cpu_vec_isa``, a private module): which ISA
this machine compiles for, and answering the package loader's question from a record.

Every use of that module is here, so a torch release that changes it is fixed in one place;
where its names are missing, the callers fall back to letting Inductor search as it does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def find_isa() -> tuple[str, str, tuple[str, ...]]:
    """This machine's ISA as Inductor picks it, its build flags, and every valid ISA (builds
    and loads a C++ test program per candidate: seconds, once per process)."""
    from torch._inductor import cpu_vec_isa

    isa = cpu_vec_isa.pick_vec_isa()
    valid = tuple(str(item) for item in cpu_vec_isa.valid_vec_isa_list())
    return str(isa), isa.build_arch_flags() if isa else "", valid


def answering_isa(name: str) -> contextlib.AbstractContextManager[object]:
    """While open, Inductor's ``pick_vec_isa`` returns its own ISA object named ``name``
    without probing; a no-op where this process asked Inductor already (its answer is
    cached), where no ISA has that name, or where this torch's internals differ."""
    from torch._inductor import cpu_vec_isa

    try:
        if cpu_vec_isa.valid_vec_isa_list.cache_info().currsize:
            return contextlib.nullcontext()
        known = [*cpu_vec_isa.supported_vec_isa_list, cpu_vec_isa.invalid_vec_isa]
    except AttributeError:  # another torch's internals: let it search as it does
        return contextlib.nullcontext()
    isa = next((item for item in known if str(item) == name), None)
    if isa is None:
        return contextlib.nullcontext()
    return _answering_pick_vec_isa(cpu_vec_isa, isa)


@contextlib.contextmanager
def _answering_pick_vec_isa(module: Any, isa: object) -> Iterator[None]:
    original = module.pick_vec_isa
    module.pick_vec_isa = lambda: isa
    try:
        yield
    finally:
        module.pick_vec_isa = original
