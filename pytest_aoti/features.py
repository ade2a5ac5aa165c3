"""The plugin's feature list: every feature once, and what is composed from it.

A feature is one folder (``generated/``, ``values/``, ``probes/``, ``triage/``, ``models/``) that owns
its options, its checks, its record fields and its terminal section. Its ``feature``
module declares them as data (a :class:`~pytest_aoti.options.feature.Feature`); its
``plugin`` module holds its hooks, which pytest registers with the plugin
(``pytest_plugins`` of :mod:`pytest_aoti.plugin`): ``pytest_aoti_checks`` gives its
checks, the way a downstream plugin's are given, and ``pytest_aoti_terminal_summary`` its
section. Nothing outside a feature's folder imports its modules but this list (its
declaration) and pytest (its plugin).

The typed options are composed here: :class:`CheckOptions` is the core per-check options
and every feature's, one frozen dataclass (``plan.options.probes`` is typed under
``mypy --strict``), and :class:`FeatureSettings` the features' session options, which
:class:`~pytest_aoti.options.settings.AotiSettings` extends.

Pure logic without torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import Field, dataclass
from typing import Any

from pytest_aoti.generated.feature import GENERATED, GeneratedOptions
from pytest_aoti.models.feature import MODELS, ModelSettings
from pytest_aoti.options.check_options import CoreOptions
from pytest_aoti.options.feature import Feature
from pytest_aoti.options.fields import per_check_fields, per_check_rows, session_rows
from pytest_aoti.options.option import Option
from pytest_aoti.probes.feature import PROBES, ProbeOptions, ProbeSettings
from pytest_aoti.triage.feature import TRIAGE, TriageOptions, TriageSettings
from pytest_aoti.values.feature import VALUES, ValuesOptions

FEATURES: tuple[Feature, ...] = (GENERATED, VALUES, TRIAGE, PROBES, MODELS)
"""Every feature, in the order of their options in ``--help``, their checks in a phase
and their sections in the summary."""


# The classes below name each feature's options class again, as static bases, so that the
# composed fields are typed; the import-time check keeps them equal to FEATURES.


@dataclass(frozen=True)
class CheckOptions(ProbeOptions, TriageOptions, ValuesOptions, GeneratedOptions, CoreOptions):
    """Every per-check option's value for one check: the core options then each
    feature's, each from the field's default, then the command line or ini file, the
    hooks, the marker and the call (the resolver's layers)."""


@dataclass(frozen=True)
class FeatureSettings(ModelSettings, ProbeSettings, TriageSettings):
    """The session options the features own (``settings.hazards``, ``settings.models``)."""


def _composed(composed: type, core: tuple[type, ...], declared: str) -> None:
    expected = (*reversed([getattr(f, declared) for f in FEATURES if getattr(f, declared)]),)
    if composed.__bases__ != (*expected, *core):
        raise TypeError(f"{composed.__name__} must extend the features' {declared} classes")


_composed(CheckOptions, (CoreOptions,), "options")
_composed(FeatureSettings, (), "settings")


def option_fields() -> tuple[Field[Any], ...]:
    """The fields of :class:`CheckOptions` that are per-check options, in order."""
    return per_check_fields(CheckOptions)


def check_rows() -> tuple[Option, ...]:
    """The rows of the per-check options: the core ones, then each feature's."""
    return per_check_rows(CheckOptions)


def feature_session_rows() -> tuple[Option, ...]:
    """The rows of the features' session options, in feature order."""
    return tuple(row for f in FEATURES if f.settings for row in session_rows(f.settings))


def options_from(values: Any) -> CheckOptions:
    """The :class:`CheckOptions` of an object that has options as attributes (a
    :class:`~pytest_aoti.options.defaults.CheckDefaults`) or of a dict by name, a field's
    default where it lacks one."""
    if not isinstance(values, dict):
        values = {
            item.name: getattr(values, item.name)
            for item in option_fields()
            if hasattr(values, item.name)
        }
    return CheckOptions(
        **{item.name: values.get(item.name, item.default) for item in option_fields()}
    )


def record_fields() -> Mapping[str, Any]:
    """The fields every feature adds to each check's JSON record, with their values where
    the feature did not run."""
    return {name: value for f in FEATURES for name, value in f.record_fields.items()}


def record_properties(fields: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Every feature's JUnit properties of a record's fields, in feature order."""
    return [prop for f in FEATURES if f.properties for prop in f.properties(fields)]


def plugins() -> tuple[str, ...]:
    """The modules of the features' hooks, in feature order."""
    return tuple(f.plugin for f in FEATURES if f.plugin)
