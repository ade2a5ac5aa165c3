"""What ``timm:`` and ``torchvision:`` specs share: the name looked up in the library's own
list (with the closest names when it is not there), overrides read as keyword arguments,
and an image batch with a dynamic batch dim.

No torch at import time, and never the library: the callers pass the list of names; torch
loads where the inputs are made, inside the test.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl

from pytest_aoti.models.model_spec import closest, usage_error

BATCH, MAX_BATCH = 2, 8
"""The example batch and the largest batch the dynamic dim accepts."""
SIDE = 64
"""The image side of a model that takes any size (a convnet): small, so compiles are quick."""


def split_spec(text: str, prefix: str) -> tuple[str, str]:
    """``timm:vit_tiny_patch16_224?img_size=96`` → ``("vit_tiny_patch16_224", "img_size=96")``."""
    name, _, query = text[len(prefix) :].partition("?")
    return name.strip(), query


def check_name(spec: str, name: str, known: Sequence[str], library: str, lister: str) -> None:
    """A usage error naming ``name`` and the closest of ``known`` when it is not among them."""
    if name in known:
        return
    raise usage_error(
        spec, f"{library} has no model {name!r}{closest(name, known)} (all: {lister})"
    )


def read_overrides(spec: str, query: str) -> dict[str, Any]:
    """``a=1&b=true&c=[1,2]&d=avg`` → ``{"a": 1, "b": True, "c": [1, 2], "d": "avg"}``:
    keyword arguments for the library's constructor, each a Python identifier, each value
    a JSON literal (numbers, true/false/null, lists) or else the text itself."""
    if not query:
        return {}
    pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=False)
    if not pairs:
        raise usage_error(spec, "expected overrides as ?name=value&name=value")
    overrides: dict[str, Any] = {}
    for name, text in pairs:
        if not name.isidentifier():
            raise usage_error(spec, f"{name!r} is no keyword argument name")
        if name in overrides:
            raise usage_error(spec, f"{name} is given twice")
        overrides[name] = literal(text)
    return overrides


def literal(text: str) -> Any:
    """A spec value as Python: ``64`` → 64, ``0.1`` → 0.1, ``true`` → True, ``[1,2]`` → a
    list; text that is no JSON literal stays text (``global_pool=avg``)."""
    word = text.strip()
    lowered = word.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    try:
        return json.loads(word)
    except ValueError:
        return word


def check_side(spec: str, name: str, value: Any) -> int:
    """An image size override: a whole number of pixels, at least 8."""
    if isinstance(value, list) and len(value) == 2 and value[0] == value[1]:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int) or value < 8:
        raise usage_error(spec, f"{name}={value!r}: expected a whole number of pixels (>= 8)")
    return value


def image_case(module: Any, shape: Sequence[int], dtype: Any = None) -> dict[str, Any]:
    """``module`` with one image input of ``(BATCH, *shape)`` and a dynamic batch dim."""
    import torch
    from torch.export import Dim

    x = torch.randn(BATCH, *shape, dtype=dtype or torch.float32)
    batch = Dim("batch", min=1, max=MAX_BATCH)
    return {"module": module, "args": (x,), "dynamic_shapes": ({0: batch},)}


def unexpected_keyword(error: TypeError) -> str | None:
    """The argument name of Python's "got an unexpected keyword argument 'x'", else None."""
    text = str(error)
    marker = "unexpected keyword argument "
    if marker not in text:
        return None
    return text.split(marker, 1)[1].strip("'\" ")
