"""What an ``aoti.check`` call says, checked before anything is exported or compiled.

The module and its inputs (no tensor on the ``meta`` device), ``samples``, the types of
``mutates=`` and ``mutated_buffers=``, and every per-check option keyword against its row
of :data:`~pytest_aoti.settings.OPTIONS`: a mistake is an ``AotiUsageError`` at the user's
line that costs no compile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytest_aoti.errors import AotiUsageError
from pytest_aoti.settings import keyword_options, option_problem

if TYPE_CHECKING:
    import torch


def check_module_and_inputs(module: Any, args: Any, kwargs: Any) -> None:
    __tracebackhide__ = True
    import torch

    if not isinstance(module, torch.nn.Module):
        raise AotiUsageError(
            f"module must be a torch.nn.Module, got {type(module).__name__}; "
            "wrap a function in a Module whose forward calls it"
        )
    if not isinstance(args, tuple):
        raise AotiUsageError(
            f"args must be a tuple of positional inputs, got {type(args).__name__}; "
            "write (x,) for a single input"
        )
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise AotiUsageError(f"kwargs must be a dict, got {type(kwargs).__name__}")
    check_not_meta(module, args, kwargs)


def check_not_meta(module: torch.nn.Module, args: Any, kwargs: Any) -> None:
    """A tensor on the ``meta`` device has a shape but no data: nothing can run on it."""
    __tracebackhide__ = True
    import torch
    import torch.utils._pytree as pytree

    for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        if tensor.is_meta:
            raise AotiUsageError(
                f"the module's {name!r} is on the meta device (a shape, no data); "
                "materialize it first, e.g. module.to_empty(device=...) then load_state_dict"
            )
    leaves, _ = pytree.tree_flatten_with_path((tuple(args), dict(kwargs or {})))
    for path, leaf in leaves:
        if isinstance(leaf, torch.Tensor) and leaf.is_meta:
            where = ("args" if getattr(path[0], "idx", 0) == 0 else "kwargs") + pytree.keystr(
                path[1:]
            )
            raise AotiUsageError(
                f"input {where} is on the meta device (a shape, no data); "
                "pass a tensor with values, e.g. torch.randn(..., device='cpu')"
            )


def checked_samples(samples: Any, dynamic_shapes: Any) -> list[tuple[Any, ...]]:
    __tracebackhide__ = True
    if samples is None:
        return []
    if isinstance(samples, tuple) or not isinstance(samples, Sequence):
        raise AotiUsageError(
            "samples must be a list of argument tuples, e.g. samples=[(x2,), (x3,)]"
        )
    for index, sample in enumerate(samples):
        if not isinstance(sample, tuple):
            raise AotiUsageError(
                f"samples[{index}] must be a tuple of positional inputs, got {type(sample).__name__}"
            )
    if samples and dynamic_shapes is None:
        raise AotiUsageError(
            'samples need dynamic_shapes: pass a torch.export spec or dynamic_shapes="auto"'
        )
    return list(samples)


def check_declarations(mutates: Any, mutated_buffers: Any) -> None:
    """``mutates=`` and ``mutated_buffers=`` have the right types before anything compiles."""
    __tracebackhide__ = True
    if mutates is not None:
        if not isinstance(mutates, Mapping):
            raise AotiUsageError(
                "mutates must be a dict of input name to expected value, e.g. "
                f'mutates={{"x": expected}} (or {{}}: none), got {type(mutates).__name__}'
            )
        bad = [key for key in mutates if not isinstance(key, str)]
        if bad:
            raise AotiUsageError(
                f"mutates must be keyed by input names (str), got {bad[0]!r}; "
                'e.g. mutates={"x": expected}'
            )
    if mutated_buffers is not None:
        if isinstance(mutated_buffers, str):
            raise AotiUsageError(
                "mutated_buffers must be a set, list or tuple of buffer names, got the string "
                f'{mutated_buffers!r}; write mutated_buffers={{"{mutated_buffers}"}}'
            )
        if not isinstance(mutated_buffers, (set, frozenset, list, tuple)) or not all(
            isinstance(name, str) for name in mutated_buffers
        ):
            raise AotiUsageError(
                "mutated_buffers must be a set, list or tuple of buffer names (str), got "
                f'{mutated_buffers!r}; e.g. mutated_buffers={{"counter"}}'
            )


def keyword_values(explicit: Mapping[str, Any], others: Mapping[str, Any]) -> dict[str, Any]:
    """The per-check options a call passed (explicit keywords and ``**options``), checked
    against their rows: an unknown name or a bad value is a usage error."""
    __tracebackhide__ = True
    allowed = keyword_options()
    unknown = sorted(set(others) - set(allowed))
    if unknown:
        raise AotiUsageError(
            f"aoti.check() got unknown option(s) {', '.join(unknown)}; "
            f"per-check options: {', '.join(allowed)}"
        )
    values = {**explicit, **others}
    for name, value in values.items():
        problem = option_problem(name, value)
        if problem:
            raise AotiUsageError(problem)
    return values
