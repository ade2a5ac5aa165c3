"""The one resolver of options: row default, command line or ini file, hooks, marker, call.

Every value a test gives (a marker's or a call's keyword) is checked here, once, against
its row: an unknown name (:mod:`~pytest_aoti.options.keywords`) or a bad value is an
``AotiUsageError`` before anything is exported. :func:`layered_defaults` layers a test's
defaults (up to its markers); :func:`call_options` adds a call's keywords and returns what
the check reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pytest_aoti import features
from pytest_aoti.errors import AotiUsageError
from pytest_aoti.options import defaults, keywords, table
from pytest_aoti.options.values import ValueProblem

if TYPE_CHECKING:
    from pytest_aoti.features import CheckOptions
    from pytest_aoti.options.defaults import CheckDefaults
    from pytest_aoti.options.settings import AotiSettings
    from pytest_aoti.tolerance import Tolerance, ToleranceHook


class Marker(Protocol):
    """What the resolver reads of a ``@pytest.mark.aoti`` (a ``pytest.Mark``)."""

    @property
    def args(self) -> tuple[Any, ...]: ...

    @property
    def kwargs(self) -> Mapping[str, Any]: ...


def checked(values: Mapping[str, Any], *, marker: bool) -> dict[str, Any]:
    """``values`` of a marker (``marker=True``) or an ``aoti.check`` call, each checked
    against its row and as the checks read it; None stays None (not set)."""
    __tracebackhide__ = True
    by_name = {option.keyword_name: option for option in table.rows()}
    allowed = table.marker_options() if marker else table.keyword_options()
    place = keywords.MARKER if marker else keywords.CHECK
    keywords.refuse_unknown(place, [name for name in values if name not in allowed])
    result: dict[str, Any] = {}
    for name, value in values.items():
        check = by_name[name].check
        try:
            result[name] = value if value is None or check is None else check(name, value)
        except ValueProblem as problem:
            raise AotiUsageError(
                f"@pytest.mark.aoti: {problem}" if marker else str(problem)
            ) from None
    return result


def layered_defaults(
    settings: AotiSettings,
    markers: Iterable[Marker],
    *,
    inductor_configs: Mapping[str, Any],
    export_options: Mapping[str, Any],
    tolerance_hook: ToleranceHook | None,
) -> CheckDefaults:
    """What a test's checks start from, lowest first: each option's default, the command
    line or ini file (``settings``), the hooks' answers (``inductor_configs`` merged over
    the ini file's, ``export_options``, ``tolerance_hook``), then the test's markers from
    the farthest to the closest (inductor configs are merged)."""
    __tracebackhide__ = True
    layered = defaults.CheckDefaults(
        **_fields(settings.checks),
        base_rtol=settings.rtol,
        base_atol=settings.atol,
        inductor_configs={**(settings.inductor_configs or {}), **inductor_configs},
        export_options=dict(export_options),
        tolerance_hook=tolerance_hook,
    )
    for marker in markers:
        if marker.args:
            raise AotiUsageError(
                f"@pytest.mark.aoti takes keyword options only "
                f"({', '.join(table.marker_options())}), got positional {marker.args!r}"
            )
        layered = layered.overridden(**checked(marker.kwargs, marker=True))
    return layered


@dataclass(frozen=True)
class CallOptions:
    """A call's options resolved over its test's defaults: what compiling and the checks
    read."""

    options: CheckOptions
    tolerance: Tolerance
    inductor_configs: dict[str, Any]
    """The ini file's, the hook's, the marker's and the call's, merged."""
    export_kwargs: dict[str, Any]
    """``torch.export.export`` options: the hook's and the variant's, then ``strict``."""


def call_options(base: CheckDefaults, values: Mapping[str, Any]) -> CallOptions:
    """The options of one call: ``values`` (its keywords, None for not given) checked and
    laid over ``base``."""
    __tracebackhide__ = True
    layered = base.overridden(**checked(values, marker=False))
    return CallOptions(
        options=features.options_from(layered),
        tolerance=layered.tolerance(None, None),
        inductor_configs=dict(layered.inductor_configs),
        export_kwargs=layered.export_kwargs(None),
    )


def _fields(options: CheckOptions) -> dict[str, Any]:
    return {item.name: getattr(options, item.name) for item in features.option_fields()}
