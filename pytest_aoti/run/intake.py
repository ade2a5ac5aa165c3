"""The module a call hands in, judged before anything is exported: each mistake is a usage
error at the user's line; a ``torch.compile``'d module is unwrapped, with a note.
No torch at import time: ``import pytest_aoti`` loads this module (through the tester)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from pytest_aoti.errors import AotiUsageError

if TYPE_CHECKING:
    import torch


def module_handed_in(module: Any) -> tuple[torch.nn.Module, tuple[str, ...]]:
    """``module`` as the check takes it, and what it notes: a class, a ScriptModule or
    anything but a Module is a usage error; a ``torch.compile``'d one is its ``_orig_mod``."""
    __tracebackhide__ = True
    import torch

    if isinstance(module, type) and issubclass(module, torch.nn.Module):
        raise AotiUsageError(f"pass an instance: {module.__name__}(), not the class")
    if isinstance(module, torch.jit.ScriptModule):
        raise AotiUsageError(
            "torch.export cannot export a ScriptModule: pass the nn.Module you scripted"
        )
    if not isinstance(module, torch.nn.Module):
        raise AotiUsageError(
            f"module must be a torch.nn.Module, got {type(module).__name__}; "
            "wrap a function in a Module whose forward calls it"
        )
    original = _compiled_original(module)
    if original is None:
        return module, ()
    note = (
        f"a torch.compile'd module was handed in: the check uses its original module "
        f"({type(original).__name__}, from _orig_mod), which eager runs and torch.export "
        "exports; pass that module itself to leave this note out"
    )
    return original, (note,)


def _compiled_original(module: torch.nn.Module) -> torch.nn.Module | None:
    """The module ``torch.compile`` wrapped, for an ``OptimizedModule``; None otherwise."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")  # never imported: none is one
    optimized = getattr(eval_frame, "OptimizedModule", None)
    if optimized is None or not isinstance(module, optimized):
        return None
    original = getattr(module, "_orig_mod", None)
    import torch

    return original if isinstance(original, torch.nn.Module) else None


def check_inference_mode(module: torch.nn.Module) -> None:
    """Refuse a module whose BatchNorm-like layers train, updating their buffers on every
    call: the check would compare a training step, rarely what a test means."""
    __tracebackhide__ = True
    from torch.nn.modules.batchnorm import _NormBase

    for name, layer in module.named_modules():
        if isinstance(layer, _NormBase) and layer.training and layer.track_running_stats:
            where = f"'{name}'" if name else f"the {type(layer).__name__}"
            raise AotiUsageError(
                f"the module is in training mode: {where} updates its running statistics "
                "on every call; call model.eval() to check inference, or pass "
                "training=True to check the training-mode program"
            )
