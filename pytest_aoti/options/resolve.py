"""The one resolver of options: row default, command line or ini file, hooks, marker, call. Each
marker or call value is checked against its row here, once, before anything is exported."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from pytest_aoti.errors import AotiUsageError
from pytest_aoti.options import defaults, keywords
from pytest_aoti.options.parsers import ValueProblem

if TYPE_CHECKING:
    from pytest_aoti.options.catalog import Catalog
    from pytest_aoti.options.defaults import CheckDefaults
    from pytest_aoti.options.settings import AotiSettings
    from pytest_aoti.tolerance import ToleranceHook


class Marker(Protocol):
    """What the resolver reads of a ``@pytest.mark.aoti`` (a ``pytest.Mark``)."""

    @property
    def args(self) -> tuple[Any, ...]: ...

    @property
    def kwargs(self) -> Mapping[str, Any]: ...


def checked(values: Mapping[str, Any], *, marker: bool, catalog: Catalog) -> dict[str, Any]:
    """A marker's or call's ``values``, each checked against its row of ``catalog``; None
    stays None."""
    __tracebackhide__ = True
    by_name = {option.keyword_name: option for option in catalog.rows()}
    allowed = catalog.marker_options() if marker else catalog.keyword_options()
    place = keywords.MARKER if marker else keywords.CHECK
    keywords.refuse_unknown(place, [name for name in values if name not in allowed], catalog)
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
    catalog: Catalog,
    inductor_configs: Mapping[str, Any],
    export_options: Mapping[str, Any],
    tolerance_hook: ToleranceHook | None,
) -> CheckDefaults:
    """What a test's checks start from, lowest first: defaults, ``settings``, the hooks' answers
    (``inductor_configs`` merged over the ini file's), then the markers from farthest to closest;
    ``catalog``: the run's options."""
    __tracebackhide__ = True
    layered = defaults.CheckDefaults(
        options=settings.checks,
        catalog=catalog,
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
                f"({', '.join(catalog.marker_options())}), got positional {marker.args!r}"
            )
        layered = layered.overridden(**checked(marker.kwargs, marker=True, catalog=catalog))
    return layered


def call_defaults(base: CheckDefaults, values: Mapping[str, Any]) -> CheckDefaults:
    """One call's defaults: its keywords ``values``, checked, laid over ``base``."""
    __tracebackhide__ = True
    return base.overridden(**checked(values, marker=False, catalog=base.catalog))
