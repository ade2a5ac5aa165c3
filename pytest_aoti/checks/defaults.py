"""What a check falls back to: the options, the hooks and the marker, layered.

The per-check options are rows of :data:`pytest_aoti.settings.OPTIONS`; tolerances,
``strict`` and inductor configs are layered with the hooks and are fields here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields
from typing import TYPE_CHECKING, Any

from pytest_aoti.errors import AotiUsageError
from pytest_aoti.settings import check_option, check_option_names

if TYPE_CHECKING:
    from pytest_aoti.tolerance import Tolerance, ToleranceHook


@dataclass(frozen=True)
class CheckDefaults:
    """Defaults a check falls back to: the options (command line, ini file), the hooks and
    the marker.

    Tolerances, ``strict`` and inductor configs are layered with the hooks (fields here);
    every other per-check option (a row of :data:`pytest_aoti.settings.OPTIONS`:
    ``examples``, ``max_dim``, ``localize``, ...) is in :attr:`options` and reads as an
    attribute (``defaults.examples``), its row's default where nothing set it.
    """

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
    """``torch.export.export`` keyword arguments from the ``pytest_aoti_export_options``
    hook and the ``--aoti-export`` variant, below the marker's and the call's ``strict``."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """The other per-check options set by the options or the marker, by name."""

    def __getattr__(self, name: str) -> Any:
        # only reached for names that are not fields: the per-check options
        option = check_option(name)
        if option is None:
            raise AttributeError(f"{type(self).__name__} has no option {name!r}")
        return self.__dict__.get("options", {}).get(name, option.default)

    def option_values(self) -> dict[str, Any]:
        """Every per-check option that is not a field, with its value here."""
        fields = {item.name for item in dataclass_fields(self)}
        return {name: getattr(self, name) for name in check_option_names() if name not in fields}

    def overridden(self, **values: Any) -> CheckDefaults:
        """A copy with every non-None value of ``values`` applied (configs are merged)."""
        values = {name: value for name, value in values.items() if value is not None}
        for name in ("inductor_configs", "export_options"):
            if name in values:
                values[name] = {**getattr(self, name), **values[name]}
        fields = {item.name for item in dataclass_fields(self)}
        options = {name: value for name, value in values.items() if name not in fields}
        unknown = sorted(name for name in options if check_option(name) is None)
        if unknown:
            raise AotiUsageError(f"unknown check option(s) {', '.join(unknown)}")
        direct = {name: value for name, value in values.items() if name in fields}
        return replace(self, **direct, options={**self.options, **options})

    def tolerance(self, rtol: float | None, atol: float | None) -> Tolerance:
        """The layered tolerance of a check whose call passed ``rtol`` / ``atol``."""
        from pytest_aoti.tolerance import Tolerance

        return Tolerance(
            rtol=self.rtol if rtol is None else rtol,
            atol=self.atol if atol is None else atol,
            hook=self.tolerance_hook,
            base_rtol=self.base_rtol,
            base_atol=self.base_atol,
        )

    def export_kwargs(self, strict: bool | None) -> dict[str, Any]:
        """Export options: the hook's and the variant's, then the marker's and the call's
        ``strict``."""
        options = dict(self.export_options)
        chosen = strict if strict is not None else self.strict
        if chosen is not None:
            options["strict"] = chosen
        return options
