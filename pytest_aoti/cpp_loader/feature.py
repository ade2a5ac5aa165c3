"""The C++ loader check, declared: its option, record field and JUnit properties. Pure data
without torch; the check is :mod:`.check`, its hooks :mod:`.plugin`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_aoti.api import Feature, ValueKind, per_check


@dataclass(frozen=True)
class CppLoaderOptions:
    """The per-check option of the C++ loader check."""

    cpp_loader: bool = per_check(
        True,
        "After parity on the example, load the package with the C++ AOTIModelPackageLoader "
        "in a process without Python (a small runner built once per torch build and "
        "compiler, kept in the cache) and run the example and the samples through it: its "
        "outputs must equal the Python engine's and match eager's. Skipped, with the reason, "
        "on a machine without a C++ compiler or torch's headers, or for a program that "
        "calls custom ops registered in Python. Default: on.",
        kind=ValueKind.SWITCH,
        marker=True,
        keyword=True,
    )


def cpp_loader_properties(fields: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``aoti_cpp_loader`` (``passed`` or ``skipped: why``) and the largest differences."""
    record = fields.get("cpp_loader")
    if not isinstance(record, Mapping):
        return []
    if not record.get("ran"):
        return [("aoti_cpp_loader", f"skipped: {record.get('skipped', '')}")]
    return [
        ("aoti_cpp_loader", "passed"),
        ("aoti_cpp_loader_max_abs_vs_engine", record.get("max_abs_vs_engine")),
        ("aoti_cpp_loader_max_abs_vs_eager", record.get("max_abs_vs_eager")),
    ]


CPP_LOADER = Feature(
    "cpp-loader",
    "The C++ loader: the package loaded by AOTIModelPackageLoader without Python, against "
    "the Python engine and eager",
    options=CppLoaderOptions,
    record_fields={"cpp_loader": None},
    properties=cpp_loader_properties,
)
"""``cpp_loader`` in every JSON record: None where the check did not run; else ``ran``,
``seconds``, the runner's ``build_seconds``, ``build_wait_seconds``, ``start_seconds``,
``load_seconds`` and ``call_seconds``, ``exact``, ``threads``, ``runners``, ``input_sets``,
``max_abs_vs_engine``, ``max_abs_vs_eager``; or ``ran: false`` and ``skipped``, the reason."""
