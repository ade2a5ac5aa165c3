"""What the draws a test passed depend on beyond the package and the test, as text for the
key they are kept under (:mod:`.check`): the example, the tolerance, ``mutates``."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import torch
import torch.utils._pytree as pytree

from pytest_aoti.api import InputSet


def mutates_text(mutates: Any) -> str:
    """``mutates`` as the draws depend on it: an expectation function by its name and code
    (its repr holds an address that changes every run)."""
    if isinstance(mutates, (set, frozenset, list, tuple)):
        return repr(sorted(map(str, mutates)))  # a set's order changes with the run's hash seed
    if not isinstance(mutates, Mapping):
        return repr(mutates)
    parts = []
    for name, expected in sorted(mutates.items(), key=lambda item: str(item[0])):
        code = getattr(expected, "__code__", None)
        if callable(expected) and code is not None:
            digest = hashlib.blake2b(code.co_code, digest_size=8).hexdigest()
            parts.append(f"{name}={getattr(expected, '__qualname__', '')}:{digest}")
        elif callable(expected):
            parts.append(f"{name}={type(expected).__qualname__}")
        elif isinstance(expected, torch.Tensor):
            parts.append(f"{name}={example_digest(((expected,), {}))}")
        else:
            parts.append(f"{name}={expected!r}")
    return ";".join(parts)


def tolerance_text(tolerance: Any) -> str:
    """The tolerance's own figures (its hook is a function: its address changes each run)."""
    fields = ("rtol", "atol", "base_rtol", "base_atol")
    return repr(tuple(getattr(tolerance, name, None) for name in fields))


def example_digest(input_set: InputSet) -> str | None:
    """Every leaf of the example: each tensor's layout, device and bytes, other leaves' repr;
    None where a tensor's bytes cannot be read (a subclass, a quantized tensor)."""
    digest = hashlib.blake2b(digest_size=20)
    try:
        for leaf in pytree.tree_leaves(input_set):
            if not isinstance(leaf, torch.Tensor):
                digest.update(f"{type(leaf).__name__}:{leaf!r};".encode())
                continue
            layout = (tuple(leaf.shape), str(leaf.dtype), leaf.stride(), str(leaf.device))
            digest.update(f"{layout};".encode())
            flat = leaf.detach().resolve_conj().resolve_neg().cpu().contiguous().reshape(-1)
            digest.update(flat.view(torch.uint8).numpy().data)
    except (RuntimeError, TypeError, ValueError):
        return None
    return digest.hexdigest()
