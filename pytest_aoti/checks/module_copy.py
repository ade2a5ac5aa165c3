"""Copies of the caller's module where ``copy.deepcopy`` cannot make one. A class whose
``__new__`` takes required arguments (a library's LoRA layer) cannot be rebuilt through the
pickle protocol that ``deepcopy`` uses, and torch.export never copies, so the raw pipeline takes
such a module. Its copy is then built field by field (:func:`field_copy`): each module of the
tree made with ``object.__new__`` (its class's ``__new__`` and ``__init__`` are never called)
and given a deep copy of its ``__dict__``, the ``memo`` deciding what is shared as it does for
``deepcopy``; an attribute that cannot be deep-copied either is shared with the original.
No torch at import time."""

from __future__ import annotations

import copy
import weakref
from collections import ChainMap
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

_OWNED = ("_parameters", "_buffers", "_modules")
"""A module's fields a copy never shares: a failure to copy one fails the copy."""


@dataclass(frozen=True)
class CopyRefusal:
    """Why ``copy.deepcopy`` refused a module, and what its field-by-field copies share."""

    error: str
    """``TypeError: LoRA.__new__() missing 2 required positional arguments: …``."""
    shared: tuple[str, ...] = ()
    """The attributes a copy shares with the original (``self.block.lock``)."""

    def note(self) -> str:
        """The record's note: why, and which way the module was kept unchanged."""
        text = (
            f"the module could not be deep-copied ({self.error}): the copies the check runs, "
            "so that your module never changes, were built field by field, each submodule "
            "made without calling its class's __new__ or __init__"
        )
        if self.shared:
            listed = ", ".join(self.shared[:3])
            more = f" and {len(self.shared) - 3} more" if len(self.shared) > 3 else ""
            text += (
                f"; {listed}{more} cannot be copied either and "
                f"{'are' if len(self.shared) > 1 else 'is'} shared with your module"
            )
        return text


_REFUSED: dict[int, tuple[weakref.ref[Any], CopyRefusal]] = {}
"""The modules ``deepcopy`` refused (and their copies), by identity while they live (never by
``==``, which a module class may define): later copies go field by field at once."""


def copy_refusal(module: torch.nn.Module) -> CopyRefusal | None:
    """Why ``copy.deepcopy`` refused ``module`` (or the module it was copied from); None
    where it never did."""
    entry = _REFUSED.get(id(module))
    return entry[1] if entry is not None and entry[0]() is module else None


def _remember(module: torch.nn.Module, refusal: CopyRefusal) -> None:
    key = id(module)

    def forget(ref: weakref.ref[Any]) -> None:
        if key in _REFUSED and _REFUSED[key][0] is ref:
            del _REFUSED[key]

    _REFUSED[key] = (weakref.ref(module, forget), refusal)


def copy_module(module: torch.nn.Module, memo: dict[Any, Any] | None = None) -> torch.nn.Module:
    """``copy.deepcopy(module, memo)``; where ``deepcopy`` fails, :func:`field_copy` with the
    same ``memo`` (then :func:`copy_refusal` says why). Raises what the field-by-field copy
    raises where neither can copy it."""
    refusal = copy_refusal(module)
    if refusal is None:
        try:
            return copy.deepcopy(module, dict(memo) if memo is not None else None)
        except Exception as error:  # a class whose __new__ needs arguments, a lock, a handle
            message = str(error).strip().splitlines()[0][:160] if str(error).strip() else ""
            refusal = CopyRefusal(f"{type(error).__name__}: {message}".rstrip(": "))
    shared: list[str] = []
    copied = field_copy(module, memo if memo is not None else {}, shared)
    refusal = CopyRefusal(refusal.error, tuple(shared))
    _remember(module, refusal)
    _remember(copied, refusal)  # a copy of the copy is refused in the same way
    return copied


def field_copy(
    module: torch.nn.Module, memo: dict[Any, Any], shared: list[str] | None = None
) -> torch.nn.Module:
    """A deep copy of ``module`` built without its classes' ``__new__``: every module of the
    tree that ``memo`` does not map made with ``object.__new__`` (a module reached twice stays
    one), each field of its ``__dict__`` deep-copied through ``memo`` (a Parameter ``memo``
    maps is that one). A field that cannot be copied is shared and its path added to
    ``shared``, except ``_parameters``, ``_buffers`` and ``_modules``, whose failure is
    raised."""
    named = [item for item in module.named_modules() if id(item[1]) not in memo]
    for _, sub in named:  # first all: a field may point at any module of the tree
        memo[id(sub)] = object.__new__(type(sub))
    for prefix, sub in named:  # a module ``memo`` mapped already is the caller's to build
        made = memo[id(sub)]
        owner = f"self.{prefix}." if prefix else "self."
        for name, value in vars(sub).items():
            try:
                made.__dict__[name] = _deepcopy_or_raise(value, memo)
            except Exception:
                if name in _OWNED:
                    raise
                made.__dict__[name] = value
                if shared is not None:
                    shared.append(owner + name)
    result: torch.nn.Module = memo[id(module)]
    return result


def _deepcopy_or_raise(value: Any, memo: dict[Any, Any]) -> Any:
    """``copy.deepcopy(value, memo)`` that adds to ``memo`` only if it succeeds: a failed copy
    leaves no half-built object there for a later field to share."""
    trial: ChainMap[Any, Any] = ChainMap({}, memo)
    copied = copy.deepcopy(value, trial)  # type: ignore[arg-type]  # any mapping serves
    made = trial.maps[0]
    kept = made.pop(id(trial), [])  # the originals deepcopy keeps alive while memo is in use
    memo.update(made)
    if kept:  # alive as long as memo is: their ids stay keys of memo
        memo.setdefault(id(memo), []).extend(kept)
    return copied
