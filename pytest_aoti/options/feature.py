"""What a feature of the plugin declares: :class:`Feature`.

A feature (generated shapes, deployment probes, triage, model specs) is one folder. Its
``feature`` module declares, as data, what the rest of the plugin needs before anything
runs: its per-check options (one frozen dataclass of :func:`~pytest_aoti.options.fields.per_check`
fields), its session options (one of :func:`~pytest_aoti.options.fields.session_field`
fields), the fields it adds to every JSON record, and the plugin module that holds its
hooks. :mod:`pytest_aoti.features` lists the features once; the options, the records and
the plugin's registration loop over that list.

Pure data without torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Feature:
    """One feature of the plugin, declared.

    - ``options``: a frozen dataclass of its per-check options (``plan.options.NAME``);
    - ``settings``: a frozen dataclass of its session options (``settings.NAME``);
    - ``record_fields``: the fields it adds to every check's JSON record, with the value a
      record holds where the feature did not run (so every record has the same keys);
    - ``properties``: its JUnit properties, from a record's fields (its own among them),
      in place of the plain values of its record fields;
    - ``plugin``: the module of its hooks (``pytest_aoti_checks`` for its checks,
      ``pytest_aoti_terminal_summary`` for its section, pytest's own hooks), registered
      with pytest when the plugin loads; None for a feature that is options only.
    """

    name: str
    summary: str
    """What it does, in one line."""
    options: type | None = None
    settings: type | None = None
    record_fields: Mapping[str, Any] = field(default_factory=dict)
    properties: Callable[[Mapping[str, Any]], list[tuple[str, Any]]] | None = None
    plugin: str | None = None
