"""The spec prefixes that name a model in a library, and the resolver of each.

A resolver takes the spec's text and the rootdir and returns its :class:`ModelSpec`, or
raises ``pytest.UsageError`` naming the spec. Each library is imported only when a spec
names it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pytest_aoti.models.feature import HF_PREFIX, TIMM_PREFIX, TORCHVISION_PREFIX
from pytest_aoti.models.hf import resolve_hf
from pytest_aoti.models.model_spec import ModelSpec
from pytest_aoti.models.timm import resolve_timm
from pytest_aoti.models.torchvision import resolve_torchvision

Resolver = Callable[[str, Path], ModelSpec]


RESOLVERS: dict[str, Resolver] = {
    HF_PREFIX: resolve_hf,
    TIMM_PREFIX: resolve_timm,
    TORCHVISION_PREFIX: resolve_torchvision,
}


def resolver_of(text: str) -> Resolver | None:
    """The resolver of ``text``'s prefix; None for a factory spec (``module:callable``)."""
    for prefix, resolver in RESOLVERS.items():
        if text.startswith(prefix):
            return resolver
    return None
