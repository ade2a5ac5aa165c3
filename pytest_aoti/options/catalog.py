"""Every option of a run: the core's rows and each registered feature plugin's; outside a run,
:func:`current` is the catalog of every default plugin. Pure logic without torch."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from pytest_aoti.options.check_options import CheckOptions, CoreOptions
from pytest_aoti.options.feature import Feature
from pytest_aoti.options.fields import per_check_rows, session_rows
from pytest_aoti.options.option import Option

CALL_ARGUMENTS = (
    "mutates",
    "mutated_buffers",
    "calls",
    "samples",
    "dynamic_shapes",
    "steps",
    "next_inputs",
)
"""The keywords of ``aoti.check`` besides module, args, kwargs and the options."""


class Catalog:
    """The core's options and those of ``features``, in the order of ``--help``: the core
    per-check options, each feature's, the core session options, each feature's."""

    def __init__(self, features: Sequence[Feature], *, blocked: Mapping[str, str] = {}) -> None:
        self.features = tuple(features)
        self.blocked = dict(blocked)  # keyword -> the blocked default plugin that takes it
        from pytest_aoti.options.core_rows import FIRST, SESSION

        per_feature = [per_check_rows(f.options) for f in self.features if f.options]
        sessions = [session_rows(f.settings) for f in self.features if f.settings]
        self._rows = (
            *FIRST,
            *per_check_rows(CoreOptions),
            *(row for rows in per_feature for row in rows),
            *SESSION,
            *(row for rows in sessions for row in rows),
        )

    def rows(self) -> tuple[Option, ...]:
        return self._rows

    def marker_options(self) -> tuple[str, ...]:
        """The keywords of ``@pytest.mark.aoti``, in row order."""
        return tuple(row.keyword_name for row in self._rows if row.marker)

    def keyword_options(self) -> tuple[str, ...]:
        """The option keywords of ``aoti.check``, in row order."""
        return tuple(row.keyword_name for row in self._rows if row.keyword)

    def check_keywords(self) -> tuple[str, ...]:
        """Every keyword ``aoti.check`` takes besides module, args and kwargs: what the call
        checks (:data:`CALL_ARGUMENTS`), then the option keywords."""
        return (*CALL_ARGUMENTS, *self.keyword_options())

    def marker_help(self) -> str:
        """The ``@pytest.mark.aoti`` line of ``pytest --markers``."""
        keywords = ", ".join(f"{name}=None" for name in self.marker_options())
        return (
            f"aoti({keywords}): an AOTInductor test, run on every --aoti-device; the options "
            "are defaults for the aoti fixture's checks"
        )

    def check_options(self, values: Mapping[str, Any]) -> CheckOptions:
        """The per-check options from ``values`` by keyword (the defaults where absent)."""
        per_feature = {
            f.options: f.options(**_given(f.options, values)) for f in self.features if f.options
        }
        return CheckOptions(**_given(CoreOptions, values)).with_features(per_feature)

    def settings_of(self, values: Mapping[str, Any]) -> dict[type, Any]:
        """Each feature's session settings from ``values`` by attribute."""
        return {
            f.settings: f.settings(**_given(f.settings, values))
            for f in self.features
            if f.settings
        }

    def record_fields(self) -> dict[str, Any]:
        """The fields every feature adds to each JSON record, as where it did not run (a
        copy: a record may change its own)."""
        return copy.deepcopy(
            {name: value for f in self.features for name, value in f.record_fields.items()}
        )

    def record_properties(self, record: Mapping[str, Any]) -> list[tuple[str, Any]]:
        """Every feature's JUnit properties of a record's fields, in feature order."""
        return [prop for f in self.features if f.properties for prop in f.properties(record)]


def _given(cls: Any, values: Mapping[str, Any]) -> dict[str, Any]:
    return {item.name: values[item.name] for item in fields(cls) if item.name in values}
