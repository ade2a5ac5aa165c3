"""What a check falls back to: the options, the hooks and the marker, layered.

:class:`CheckDefaults` is every per-check option (it inherits the fields of
:class:`~pytest_aoti.features.CheckOptions`) plus the values layered with the
hooks: tolerances, ``strict``, inductor configs and export options. The resolver
(:mod:`pytest_aoti.options.resolve`) builds it for each test.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pytest_aoti.features import CheckOptions

if TYPE_CHECKING:
    from pytest_aoti.tolerance import Tolerance, ToleranceHook


@dataclass(frozen=True)
class CheckDefaults(CheckOptions):
    """Defaults a check falls back to: the options (command line, ini file), the hooks and
    the marker.

    Every per-check option is a field (``defaults.examples``, ``defaults.threads``, ...),
    inherited from :class:`~pytest_aoti.features.CheckOptions`; tolerances,
    ``strict``, inductor configs and export options are layered with the hooks.
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

    def overridden(self, **values: Any) -> CheckDefaults:
        """A copy with every non-None value of ``values`` applied (configs are merged).
        The values are checked already (:mod:`pytest_aoti.options.resolve`)."""
        values = {name: value for name, value in values.items() if value is not None}
        for name in ("inductor_configs", "export_options"):
            if name in values:
                values[name] = {**getattr(self, name), **values[name]}
        return replace(self, **values)

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
