"""Inductor's private CPU vector ISA module, used only here: which ISA this machine compiles for,
and answering the package loader's question from a record."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def find_isa() -> tuple[str, str, tuple[str, ...]]:
    """This machine's ISA as Inductor picks it, its flags and every valid ISA (seconds)."""
    from torch._inductor import cpu_vec_isa

    isa = cpu_vec_isa.pick_vec_isa()
    valid = tuple(str(item) for item in cpu_vec_isa.valid_vec_isa_list())
    return str(isa), isa.build_arch_flags() if isa else "", valid


def answering_isa(name: str) -> contextlib.AbstractContextManager[object]:
    """While open, ``pick_vec_isa`` returns the ISA named ``name`` without probing, if it can."""
    from torch._inductor import cpu_vec_isa

    try:
        if cpu_vec_isa.valid_vec_isa_list.cache_info().currsize:
            return contextlib.nullcontext()
        known = [*cpu_vec_isa.supported_vec_isa_list, cpu_vec_isa.invalid_vec_isa]
    except AttributeError:  # another torch's internals: let it search as it does
        return contextlib.nullcontext()
    isa = next((item for item in known if str(item) == name), None)
    return contextlib.nullcontext() if isa is None else _answering_pick_vec_isa(cpu_vec_isa, isa)


@contextlib.contextmanager
def _answering_pick_vec_isa(module: Any, isa: object) -> Iterator[None]:
    original = module.pick_vec_isa
    module.pick_vec_isa = lambda: isa
    try:
        yield
    finally:
        module.pick_vec_isa = original


def loop_width(dtype: Any, isa_name: str | None = None, inner: int | None = None) -> int:
    """Elements per step of the vectorized loop Inductor's CPU code runs over ``dtype``
    (the ISA named ``isa_name``, default this machine's): the lanes of a bfloat16 or
    float16 vector for those dtypes (half of them where the innermost size ``inner`` is
    shorter), a float32 vector's for every other dtype (Inductor's tiling factor); 1 where
    no ISA vectorizes."""
    import torch
    from torch._inductor import cpu_vec_isa

    isa: Any = None
    if isa_name is not None:
        known = [*cpu_vec_isa.supported_vec_isa_list, cpu_vec_isa.invalid_vec_isa]
        isa = next((item for item in known if str(item) == isa_name), None)
    if isa is None:
        isa = cpu_vec_isa.pick_vec_isa()
    if not isa:
        return 1
    low_precision = dtype in (torch.bfloat16, torch.float16)
    try:
        width = int(isa.nelements(dtype if low_precision else torch.float32))
    except (KeyError, AttributeError):
        return 1
    if low_precision and inner is not None and inner < width:
        width //= 2
    return max(1, width)
