"""Python source for a ``dynamic_shapes`` spec, to paste into a test (imports torch lazily)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def format_dynamic_shapes(spec: Any) -> str:
    """Python source for ``spec``: ``name = Dim(...)`` lines, then ``dynamic_shapes = ...``."""
    import torch.utils._pytree as pytree
    from torch.export import Dim

    roots: dict[str, Any] = {}
    for dim in pytree.tree_leaves(spec):
        if isinstance(dim, Dim):
            root = getattr(dim, "root", dim)
            roots.setdefault(root.__name__, root)
    lines = [_format_root(root) for root in roots.values()]
    lines.append(f"dynamic_shapes = {_format_spec(spec, top=True)}")
    return "\n".join(lines)


def _format_root(root: Any) -> str:
    from torch.utils._sympy.numbers import int_oo

    bounds = [f"min={int(root.min)}"]
    if root.max is not int_oo and root.max is not None:
        bounds.append(f"max={int(root.max)}")
    return f'{root.__name__} = Dim("{root.__name__}", {", ".join(bounds)})'


def _format_spec(spec: Any, top: bool = False) -> str:
    from torch.export import Dim
    from torch.export.dynamic_shapes import _DerivedDim, _DimHint

    if isinstance(spec, _DerivedDim):
        return _format_derived(spec)
    if isinstance(spec, Dim):
        return str(spec.__name__)
    if isinstance(spec, _DimHint):
        text = f"Dim.{spec.type.name}"
        pairs = (("min", spec.min), ("max", spec.max))
        bounds = [f"{key}={value}" for key, value in pairs if value is not None]
        return f"{text}({', '.join(bounds)})" if bounds else text
    if isinstance(spec, Mapping):
        items = [f"{_format_key(key)}: {_format_spec(value)}" for key, value in spec.items()]
        return _join(items, "{", "}", top)
    if isinstance(spec, tuple):
        items = [_format_spec(value) for value in spec]
        return f"({items[0]},)" if len(items) == 1 and not top else _join(items, "(", ")", top)
    if isinstance(spec, list):
        return _join([_format_spec(value) for value in spec], "[", "]", top)
    return repr(spec)  # None or a static int


def _format_derived(dim: Any) -> str:
    # A derived Dim is ``scale * root + offset``; torch keeps it as a lambda.
    offset = int(dim.fn(0))
    scale = int(dim.fn(1)) - offset
    text = dim.root.__name__ if scale == 1 else f"{scale} * {dim.root.__name__}"
    if offset > 0:
        text += f" + {offset}"
    elif offset < 0:
        text += f" - {-offset}"
    return text


def _format_key(key: Any) -> str:
    return json.dumps(key) if isinstance(key, str) else repr(key)


def _join(items: list[str], open_: str, close: str, top: bool) -> str:
    if top and items:
        body = "".join(f"    {item},\n" for item in items)
        return f"{open_}\n{body}{close}"
    return f"{open_}{', '.join(items)}{close}"
