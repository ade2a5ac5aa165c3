"""What to try after a failed export, fitted to the cause and to the mode already in use.

Two things torch's own message leaves to the reader: a model-library type torch.export does
not know (a transformers ``DynamicCache`` in the outputs), and which export mode the failure
happened in (a hint to try ``strict=False`` means nothing to a non-strict export).
"""

from __future__ import annotations

import re

_UNKNOWN_TYPE = re.compile(
    r"Found <class '(?P<cls>[\w.]+)'> in (?P<where>\w+), which is not a known type"
)


def library_type_hint(text: str) -> str | None:
    """The hint for an input or output of a type torch.export cannot flatten, from torch's
    error text; None for other errors."""
    match = _UNKNOWN_TYPE.search(text)
    if match is None:
        return None
    path, where = match["cls"], match["where"]
    name = path.rsplit(".", 1)[-1]
    if path.startswith("transformers.") and name.endswith("Cache"):
        return (
            f"What to try: {name} is transformers' key/value cache, which torch.export cannot "
            f"flatten: call the model with use_cache=False (the cache only serves generation), "
            "or register the cache for export before exporting: "
            "transformers.integrations.executorch.register_dynamic_cache_export_support() "
            "for DynamicCache, "
            "transformers.exporters.exporter_dynamo.register_cache_pytrees_for_model(model) "
            "for every cache class of the model."
        )
    return (
        f"What to try: {path} in the {where} is not a pytree type: register it with "
        "torch.utils._pytree.register_pytree_node(cls, flatten_fn, unflatten_fn), or pass "
        "and return plain tensors, tuples, lists and dicts."
    )


def for_mode(hint: str, strict: bool) -> str:
    """``hint`` without advice to switch to the export mode already in use."""
    if strict:
        hint = hint.replace("strict=False (or strict=True)", "strict=False")
        return hint.replace("strict=True (or strict=False)", "strict=False")
    hint = hint.replace("strict=False (or strict=True)", "strict=True")
    hint = hint.replace("strict=True (or strict=False)", "strict=True")
    return hint.replace("export with strict=False and state", "state")
