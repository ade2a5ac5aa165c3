"""The module a call hands in, judged before anything is exported.

A mistake here would otherwise surface far from its cause: a class instead of an instance as
a hint for functions, a ScriptModule as an eager failure, a ``torch.compile``'d module as a
check of the compiled module against itself, a BatchNorm left in training mode as a torch
bug in the engine's buffers. Each is a usage error that names what to do, at the user's
line, before any compile; a ``torch.compile``'d module is unwrapped, with a note.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from pytest_aoti.errors import AotiUsageError

if TYPE_CHECKING:
    import torch


def module_handed_in(module: Any) -> tuple[torch.nn.Module, tuple[str, ...]]:
    """``module`` as the check takes it, and what it notes: a class, a ScriptModule or
    anything but a Module is a usage error; a ``torch.compile``'d module
    (``OptimizedModule``) is its original module (``_orig_mod``), with a note."""
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
    """The module ``torch.compile`` wrapped, for an ``OptimizedModule``; None otherwise.
    Where dynamo was never imported, no module can be one."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    optimized = getattr(eval_frame, "OptimizedModule", None)
    if optimized is None or not isinstance(module, optimized):
        return None
    original = getattr(module, "_orig_mod", None)
    import torch

    return original if isinstance(original, torch.nn.Module) else None


def check_inference_mode(module: torch.nn.Module) -> None:
    """A module in training mode whose layers change their buffers on every call because
    they train (BatchNorm, InstanceNorm with ``track_running_stats``): the check would
    compare a training step, which is rarely what a test of a deployed model means."""
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
