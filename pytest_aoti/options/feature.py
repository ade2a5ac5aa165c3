"""What a feature plugin declares, as data, through its ``pytest_aoti_feature`` hook. No torch."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_aoti.options.fields import per_check_rows, session_rows

if TYPE_CHECKING:
    import pytest

    from pytest_aoti.findings import BundleAdapter
    from pytest_aoti.options.option import Option


@dataclass(frozen=True)
class Feature:
    """One feature of the plugin, declared: ``options`` / ``settings``, frozen dataclasses of its
    per-check (``plan.options.NAME``) and session options (``settings.NAME``); ``record_fields``,
    added to every JSON record (value: where it did not run); ``properties``, its JUnit properties
    from a record's fields, in place of their plain values; ``kinds`` and ``bundle``, the
    kinds of failure it finds and how a repro bundle reproduces them."""

    name: str
    summary: str
    """What it does, in one line."""
    options: type | None = None
    settings: type | None = None
    record_fields: Mapping[str, Any] = field(default_factory=dict)
    properties: Callable[[Mapping[str, Any]], list[tuple[str, Any]]] | None = None
    kinds: Mapping[str, str] = field(default_factory=dict)
    """The finding kinds it owns (``FindingKind(name)``), each with what it means."""
    bundle: BundleAdapter | None = None
    """How a repro bundle reproduces a finding of its ``kinds`` (None: as the core's kinds)."""

    def rows(self) -> tuple[Option, ...]:
        """Its options' rows: the per-check ones, then the session ones."""
        return (
            *(per_check_rows(self.options) if self.options else ()),
            *(session_rows(self.settings) if self.settings else ()),
        )

    def add_options(self, parser: pytest.Parser) -> None:
        """Add its ``--aoti-*`` options and ini keys; call it from ``pytest_addoption``."""
        from pytest_aoti.options.table import add_options

        add_options(parser, self.rows())

    @property
    def plugin_name(self) -> str:
        """The name of the plugin that declares it (``-p no:aoti-NAME`` blocks it)."""
        return f"aoti-{self.name}"
