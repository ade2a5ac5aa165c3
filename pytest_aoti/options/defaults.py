"""What a check falls back to: the options, the hooks and the marker, layered (built per test by
:mod:`pytest_aoti.options.resolve`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pytest_aoti.options.catalog import Catalog
from pytest_aoti.options.check_options import CheckOptions

if TYPE_CHECKING:
    from pytest_aoti.tolerance import Tolerance, ToleranceHook

LAYERED = ("rtol", "atol", "strict", "inductor_configs")
"""Keywords layered with the hooks, not check options: the tolerance (over its hook), ``strict``
(over the export-options hook), the inductor configs (merged with the ini file's and the hook's)."""


@dataclass(frozen=True)
class CheckDefaults:
    """Defaults a check falls back to: the options, the hooks and the marker, in a run of
    ``catalog`` (default: the core's options alone; a test's come from its run's)."""

    options: CheckOptions = field(default=None)  # type: ignore[assignment]
    """Every per-check option's value (``defaults.options.random``), feature plugins' through
    ``of``; by default the catalog's defaults."""
    rtol: float | None = None
    """Set by the marker; final (above the tolerance hook and ``--aoti-rtol``)."""
    atol: float | None = None
    strict: bool | None = None
    inductor_configs: Mapping[str, Any] = field(default_factory=dict)
    base_rtol: float | None = None
    """``--aoti-rtol`` / ini: below the marker, the call and the tolerance hook."""
    base_atol: float | None = None
    tolerance_hook: ToleranceHook | None = field(default=None, compare=False)
    """The ``pytest_aoti_tolerance`` hook, asked per compared leaf."""
    export_options: Mapping[str, Any] = field(default_factory=dict)
    """``torch.export.export`` keywords from the export-options hook and ``--aoti-export``'s
    variant, below the marker's and the call's ``strict``."""
    catalog: Catalog = field(default_factory=lambda: Catalog(()), compare=False, repr=False)
    """The run's options: what a marker or a call may set."""

    def __post_init__(self) -> None:
        if self.options is None:
            object.__setattr__(self, "options", self.catalog.check_options({}))

    def overridden(self, **values: Any) -> CheckDefaults:
        """A copy with every non-None (already checked) value applied; configs are merged."""
        values = {name: value for name, value in values.items() if value is not None}
        layered = {name: values.pop(name) for name in list(values) if name in LAYERED}
        if "inductor_configs" in layered:
            layered["inductor_configs"] = {**self.inductor_configs, **layered["inductor_configs"]}
        return replace(self, options=self.options.with_values(values), **layered)

    def tolerance(self) -> Tolerance:
        """The layered tolerance of a check."""
        from pytest_aoti.tolerance import Tolerance  # imports torch

        return Tolerance(
            rtol=self.rtol,
            atol=self.atol,
            hook=self.tolerance_hook,
            base_rtol=self.base_rtol,
            base_atol=self.base_atol,
        )

    def export_kwargs(self) -> dict[str, Any]:
        """Export options: the hook's and the variant's, then the marker's and the call's strict."""
        options = dict(self.export_options)
        if self.strict is not None:
            options["strict"] = self.strict
        return options
