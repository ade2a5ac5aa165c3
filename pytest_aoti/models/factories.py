"""Calling a model factory inside its test and reading what it returned."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

from pytest_aoti.api import AotiUsageError

_RETURN_FORMS = (
    "(module, args), (module, args, kwargs) or a mapping with 'module', 'args', "
    "optional 'kwargs' and aoti.check keywords"
)
_CASE_KEYS = ("module", "args", "kwargs")


@dataclass
class ModelCase:
    """What a factory returned: the module, its example inputs, ``aoti.check`` keywords."""

    module: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    check: dict[str, Any] = field(default_factory=dict)
    """Further keywords of :meth:`~pytest_aoti.AotiTester.check` (``dynamic_shapes``, ...)."""


@AotiUsageError.user_facing
def call_factory(
    factory: Callable[..., Any], device: torch.device, spec: str, keywords: Iterable[str]
) -> ModelCase:
    """``torch.manual_seed(0)``, then the factory (given ``device=`` if it takes it); a
    wrong return shape raises ``AotiUsageError`` with the caller's frame only. ``keywords``:
    the run's ``aoti.check`` keywords (``catalog.check_keywords()``), which a returned
    mapping may hold."""
    __tracebackhide__ = True
    torch.manual_seed(0)
    try:
        signature: inspect.Signature | None = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin or C callable without a signature
        signature = None
    takes_device = signature is not None and "device" in signature.parameters
    if signature is not None:
        _check_callable_as_factory(signature, spec)
    returned = factory(device=device) if takes_device else factory()
    return read_case(returned, spec, keywords)


def _check_callable_as_factory(signature: inspect.Signature, spec: str) -> None:
    """A factory is called with no argument but ``device``: one that needs others is a
    usage error naming them, not Python's ``TypeError`` from inside the plugin."""
    __tracebackhide__ = True
    needed = [
        name
        for name, parameter in signature.parameters.items()
        if name != "device"
        and parameter.default is inspect.Parameter.empty
        and parameter.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]
    if needed:
        raise AotiUsageError(
            f"{spec} needs the argument(s) {', '.join(map(repr, needed))}; a factory is called "
            "with no arguments (or only device=): give them defaults, or name a function "
            "that calls it with the values you want"
        )


def read_case(returned: Any, spec: str, accepted: Iterable[str]) -> ModelCase:
    """The :class:`ModelCase` of a factory's return value (a mapping may hold the run's
    ``aoti.check`` keywords ``accepted``); a wrong shape is an ``AotiUsageError`` that says
    which forms are accepted."""
    if isinstance(returned, Mapping):
        keywords = frozenset(accepted)
        unknown = sorted(set(returned) - set(_CASE_KEYS) - keywords)
        if unknown:
            raise AotiUsageError(
                f"{spec} returned a mapping with unknown keys {', '.join(map(repr, unknown))}; "
                f"expected 'module', 'args', optional 'kwargs' and aoti.check keywords "
                f"({', '.join(sorted(keywords))})"
            )
        missing = [key for key in ("module", "args") if key not in returned]
        if missing:
            raise AotiUsageError(
                f"{spec} returned a mapping without {' and '.join(map(repr, missing))}; "
                f"expected {_RETURN_FORMS}"
            )
        module, args, kwargs = returned["module"], returned["args"], returned.get("kwargs")
        check = {key: value for key, value in returned.items() if key not in _CASE_KEYS}
    elif isinstance(returned, tuple) and len(returned) in (2, 3):
        module, args, kwargs = (*returned, None) if len(returned) == 2 else returned
        check = {}
    else:
        raise AotiUsageError(f"{spec} returned {_describe(returned)}; expected {_RETURN_FORMS}")
    return ModelCase(_module(module, spec), _args(args, spec), _kwargs(kwargs, spec), check)


def _module(module: Any, spec: str) -> Any:
    if not isinstance(module, torch.nn.Module):
        raise AotiUsageError(
            f"{spec} returned {_describe(module)} as its module; expected a torch.nn.Module "
            f"first, as in {_RETURN_FORMS}"
        )
    return module


def _args(args: Any, spec: str) -> tuple[Any, ...]:
    if isinstance(args, torch.Tensor):
        return (args,)  # a lone example input, as users write it
    if isinstance(args, list):
        args = tuple(args)
    if not isinstance(args, tuple):
        raise AotiUsageError(
            f"{spec} returned {_describe(args)} as its args; expected a tuple of inputs"
        )
    return args


def _kwargs(kwargs: Any, spec: str) -> dict[str, Any]:
    if kwargs is None:
        return {}
    if not isinstance(kwargs, Mapping) or not all(isinstance(key, str) for key in kwargs):
        raise AotiUsageError(
            f"{spec} returned {_describe(kwargs)} as its kwargs; expected a dict of "
            "keyword inputs by name"
        )
    return dict(kwargs)


def _describe(value: Any) -> str:
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}"
    return f"a {type(value).__name__}"


def describe_inputs(case: ModelCase) -> str:
    """``input_ids=(batch=2, seq=16) int64, ...`` for ``--aoti-models-list``: each input's
    shape, its dynamic dims named as the factory's ``dynamic_shapes`` names them."""
    named = _by_name(case)
    spec = case.check.get("dynamic_shapes")
    specs: Mapping[str, Any] = {}
    if isinstance(spec, Mapping):
        specs = spec
    elif isinstance(spec, (tuple, list)):  # positional: one entry per argument, in order
        specs = {name: dims for (name, _), dims in zip(named, spec)}

    def one(value: Any, dims: Any) -> str:
        if isinstance(value, torch.Tensor):
            dims = dims if isinstance(dims, Mapping) else {}
            sizes = [
                f"{_dim_name(dims[index])}={size}" if index in dims else str(size)
                for index, size in enumerate(value.shape)
            ]
            shape = "(" + ", ".join(sizes) + ("," if len(sizes) == 1 else "") + ")"
            return f"{shape} {str(value.dtype).removeprefix('torch.')}"
        leaves = pytree.tree_leaves(value)
        return "[" + ", ".join(one(leaf, None) for leaf in leaves) + "]"

    parts = [f"{name}={one(value, specs.get(name))}" for name, value in named]
    return ", ".join(parts) or "no inputs"


def _by_name(case: ModelCase) -> list[tuple[str, Any]]:
    """The inputs with the names of ``forward``'s parameters (``args[i]`` where unknown)."""
    try:
        parameters = list(inspect.signature(case.module.forward).parameters)
    except (TypeError, ValueError):
        parameters = []
    names = [
        parameters[index] if index < len(parameters) else f"args[{index}]"
        for index in range(len(case.args))
    ]
    return [*zip(names, case.args), *case.kwargs.items()]


def _dim_name(dim: Any) -> str:
    name = getattr(dim, "__name__", None)
    return str(name) if name else "dynamic"
