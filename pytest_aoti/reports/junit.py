"""JUnit properties (``--junitxml``, through ``item.user_properties``) of each record."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_aoti.reports.records import CheckRecord, CompileRecord

if TYPE_CHECKING:
    from pytest_aoti.options.catalog import Catalog

PLAIN_VALUES = (bool, int, float, str)
"""The values a JUnit property holds as they are; others (lists, dicts) stay in JSON."""


def compile_properties(record: CompileRecord) -> list[tuple[str, Any]]:
    """The properties of one ``aoti.compile`` call."""
    return [
        ("aoti_device", record.device),
        ("aoti_program", record.program),
        ("aoti_cache_hit", record.cache_hit),
        ("aoti_package_source", record.source),
        ("aoti_compile_seconds", round(record.compile_seconds, 3)),
    ]


def check_properties(record: CheckRecord, catalog: Catalog) -> list[tuple[str, Any]]:
    """The properties of one ``aoti.check`` call: its figures and a failure's finding, its
    features' (of the run's ``catalog``) as they render them."""
    props: list[tuple[str, Any]] = [
        ("aoti_device", record.device),
        ("aoti_program", record.program),
        ("aoti_cache_hit", record.cache_hit),
        ("aoti_compile_seconds", round(record.compile_seconds, 3)),
        ("aoti_original_compile_seconds", round(record.original_compile_seconds, 3)),
        ("aoti_outcome", record.outcome),
    ]
    optional = {
        "aoti_check_index": record.check_index if record.check_index > 1 else None,
        "aoti_layout": record.layout or None,
        "aoti_max_abs_error": record.max_abs,
        "aoti_max_rel_error": record.max_rel,
        "aoti_fp64_rescued": True if record.fp64_rescued else None,
        "aoti_engine_seconds": record.engine_seconds,
        "aoti_eager_seconds": record.eager_seconds,
        "aoti_generated_examples": record.shapes_tried or None,
    }
    props += [(name, value) for name, value in optional.items() if value is not None]
    # a check's own fields (CheckRecord.update) as plain values; features render theirs
    owned = {name for feature in catalog.features for name in feature.record_fields}
    props += [
        (f"aoti_{name}", value)
        for name, value in record.other_fields.items()
        if isinstance(value, PLAIN_VALUES) and name not in owned
    ]
    props += catalog.record_properties(record.other_fields)
    finding = record.finding
    if finding is not None:
        figures = finding.get("figures") or {}
        props += [("aoti_failure", finding["message"]), ("aoti_failure_kind", finding["kind"])]
        if record.stage is not None:
            props.append(("aoti_failure_stage", record.stage))
        for name in ("max_abs", "max_rel", "mismatched", "numel"):
            if name in figures:
                props.append((f"aoti_failure_{name}", figures[name]))
        if finding.get("node"):
            props.append(("aoti_failure_node", finding["node"].get("name")))
    return props
