"""Resolving an ``aoti.check`` or ``aoti.compile`` call before anything is exported: every
mistake is an ``AotiUsageError`` that costs no compile; the result is the one frozen plan.
No torch at import time: ``import pytest_aoti`` loads this module (through the tester)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pytest_aoti.checks.base import CheckPlan
from pytest_aoti.checks.module_copy import copy_module
from pytest_aoti.compiling.configs import check_inductor_configs
from pytest_aoti.errors import AotiUsageError
from pytest_aoti.options.resolve import call_defaults
from pytest_aoti.run.intake import check_inference_mode, module_handed_in

if TYPE_CHECKING:
    import torch

    from pytest_aoti.options.defaults import CheckDefaults


def resolve_call(
    defaults: CheckDefaults,
    device: torch.device,
    module: Any,
    args: Any,
    kwargs: Any = None,
    *,
    samples: Any = None,
    dynamic_shapes: Any = None,
    mutates: Any = None,
    mutated_buffers: Any = None,
    calls: Any = None,
    steps: Any = None,
    next_inputs: Any = None,
    options: Mapping[str, Any] | None = None,
) -> CheckPlan:
    """Check everything a call says, then move its module and input sets to ``device``."""
    __tracebackhide__ = True
    module, notes = module_handed_in(module)
    check_module_and_inputs(module, args, kwargs)
    kwargs = dict(kwargs or {})
    checked = checked_samples(samples, dynamic_shapes)
    for sample in checked:
        check_not_meta(module, sample, None)
    check_declarations(mutates, mutated_buffers)
    if calls is not None and (not isinstance(calls, int) or isinstance(calls, bool) or calls < 1):
        raise AotiUsageError(f"calls must be a positive int, got {calls!r}")
    check_steps(steps, next_inputs, calls)
    if isinstance(dynamic_shapes, str):
        check_dynamic_shapes_mode(dynamic_shapes, checked)
    resolved = call_defaults(defaults, options or {})
    check_inductor_configs(dict(resolved.inductor_configs))
    if not resolved.options.training:
        check_inference_mode(module)
    return CheckPlan(
        module=module_on_device(module, device),
        input_sets=tuple(
            inputs_on_device(set_args, kwargs, device) for set_args in (args, *checked)
        ),
        options=resolved.options,
        tolerance=resolved.tolerance(),
        inductor_configs=MappingProxyType(dict(resolved.inductor_configs)),
        export_kwargs=MappingProxyType(resolved.export_kwargs()),
        dynamic_shapes=dynamic_shapes,
        mutates=mutates,
        mutated_buffers=mutated_buffers,
        calls=calls,
        notes=notes,
        steps=steps,
        next_inputs=next_inputs,
    )


def check_steps(steps: Any, next_inputs: Any, calls: Any) -> None:
    """``steps`` is a positive int given with a callable ``next_inputs``, and without
    ``calls``: the steps are the calls, each fed by the last one's outputs."""
    __tracebackhide__ = True
    if steps is None and next_inputs is None:
        return
    if steps is None:
        raise AotiUsageError(
            "next_inputs= builds the inputs of a decode loop's next call: give steps=N too "
            "(the number of calls, the first on the example)"
        )
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise AotiUsageError(f"steps must be a positive int, got {steps!r}")
    if not callable(next_inputs):
        raise AotiUsageError(
            "steps= needs next_inputs=fn, where fn(outputs, args, kwargs) returns the next "
            "call's (args, kwargs) from this call's outputs and inputs"
        )
    if calls is not None:
        raise AotiUsageError(
            "calls= and steps= both give the number of calls: steps=N runs N calls, each on "
            "the inputs next_inputs builds from the last one's outputs; leave calls= out"
        )


def check_dynamic_shapes_mode(mode: str, samples: Sequence[Any]) -> None:
    """A string ``dynamic_shapes`` is ``"auto"``, which needs samples to infer from."""
    __tracebackhide__ = True
    if mode != "auto":
        raise AotiUsageError(f'dynamic_shapes must be a torch.export spec or "auto", got {mode!r}')
    if not samples:
        raise AotiUsageError(
            'dynamic_shapes="auto" needs samples=[...]: input sets of other sizes to infer from'
        )


def module_on_device(module: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """The module on ``device``; a moved copy (built field by field where ``copy.deepcopy``
    cannot copy it), so the caller's module is untouched."""
    tensors = [*module.parameters(), *module.buffers()]
    if all(_same_device(tensor.device, device) for tensor in tensors):
        return module
    return copy_module(module).to(device)


def inputs_on_device(
    args: tuple[Any, ...], kwargs: Mapping[str, Any], device: torch.device
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(args, kwargs)`` with every tensor on ``device`` (the caller's are not moved)."""
    import torch
    import torch.utils._pytree as pytree

    def move(leaf: Any) -> Any:
        if isinstance(leaf, torch.Tensor) and not _same_device(leaf.device, device):
            return leaf.to(device)
        return leaf

    moved_args, moved_kwargs = pytree.tree_map(move, (tuple(args), dict(kwargs)))
    return tuple(moved_args), moved_kwargs


def _same_device(actual: torch.device, wanted: torch.device) -> bool:
    if actual == wanted:
        return True
    if actual.type != wanted.type:
        return False
    if wanted.type != "cuda":
        return True
    import torch

    wanted_index = wanted.index if wanted.index is not None else torch.cuda.current_device()
    return actual.index == wanted_index


def check_module_and_inputs(module: Any, args: Any, kwargs: Any) -> None:
    __tracebackhide__ = True
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

    from pytest_aoti.compiling.tree_types import check_input_classes

    for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        if tensor.is_meta:
            raise AotiUsageError(
                f"the module's {name!r} is on the meta device (a shape, no data); "
                "materialize it first, e.g. module.to_empty(device=...) then load_state_dict"
            )
    # the paths below need every custom class's keys
    check_input_classes(tuple(args), dict(kwargs or {}))
    leaves, _ = pytree.tree_flatten_with_path((tuple(args), dict(kwargs or {})))
    for path, leaf in leaves:
        if not isinstance(leaf, torch.Tensor):
            continue
        where = ("args" if getattr(path[0], "idx", 0) == 0 else "kwargs") + pytree.keystr(path[1:])
        if leaf.is_meta:
            raise AotiUsageError(
                f"input {where} is on the meta device (a shape, no data); "
                "pass a tensor with values, e.g. torch.randn(..., device='cpu')"
            )
        kind = _unsupported_kind(leaf)
        if kind:
            raise AotiUsageError(
                f"input {where} is a {kind} tensor, which an AOTI engine does not take: pass a "
                "dense (strided) tensor, e.g. its .to_dense(), .dequantize() or the padded "
                "tensor of a nested one, and do the conversion inside forward if the model "
                "needs it"
            )


def _unsupported_kind(tensor: torch.Tensor) -> str:
    """``sparse``, ``nested``, ``quantized`` or a subclass's name; empty for a dense tensor."""
    import torch

    if tensor.is_nested:
        return "nested"
    if tensor.layout != torch.strided:
        return f"sparse ({tensor.layout})"
    if tensor.is_quantized:
        return "quantized"
    if type(tensor) not in (torch.Tensor, torch.nn.Parameter, torch.nn.Buffer):
        return f"{type(tensor).__name__} (a tensor subclass)"
    return ""


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
