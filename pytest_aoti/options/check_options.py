"""Per-check options as frozen typed objects: the core's (:class:`CoreOptions`, one field
per option, its metadata its row) and one check's (:class:`CheckOptions`: the core's, and
each feature plugin's read through ``of``). Pure logic without torch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, TypeVar

from pytest_aoti.options.fields import per_check
from pytest_aoti.options.parsers import (
    RANDOM_MODES,
    check_share,
    check_switch,
    parse_share,
    parse_switch,
)

DEFAULT_SHARE = 0.05
"""The share of a program's compile time the searches beyond the example may take."""


@dataclass(frozen=True)
class CoreOptions:
    """The per-check options of the core checks."""

    random: str = per_check(
        "fail",
        "A program that draws random numbers (dropout in training mode, rand, bernoulli, "
        "...): fail its check, or compare shapes (output shapes and dtypes, and the values "
        "of outputs no random op feeds). Default: fail.",
        parse=RANDOM_MODES.parse,
        check=RANDOM_MODES.check,
        marker=True,
        keyword=True,
    )
    crash_screen: bool = per_check(
        True,
        "Run the check's engine calls once in a child process before the test process "
        "makes them: an engine that crashes its process (a signal, an abort, a sticky CUDA "
        "error) or hangs fails its test and the run goes on. Default: on.",
        parse=parse_switch,
        check=check_switch,
        marker=True,
        keyword=True,
    )
    budget: float = per_check(
        DEFAULT_SHARE,
        "The share of the program's compile time (as recorded with its package) that the "
        "searches beyond the example may take together (at least one second for a package "
        "below 32 MiB): values draws, deployment probes and generated shapes, each after its "
        "floor (two draws, the boundary shapes); off: no limit (every draw, probe and shape). A number such as "
        f"0.1, or a percentage written with a percent sign. Default: {DEFAULT_SHARE}.",
        parse=parse_share,
        check=check_share,
        marker=True,
        keyword=True,
    )
    training: bool = per_check(
        False,
        "Check a module left in training mode on purpose: its BatchNorm-like layers update "
        "their running statistics on every call. False refuses such a module before any "
        "export, with the hint to call model.eval(). Default: False.",
        check=check_switch,
        keyword=True,
    )


_Options = TypeVar("_Options")


@dataclass(frozen=True)
class CheckOptions(CoreOptions):
    """Every per-check option's value for one check: the core's as fields
    (``plan.options.random``), each feature plugin's through :meth:`of`
    (``plan.options.of(ValuesOptions).values_draws``, typed)."""

    features: Mapping[type, Any] = field(default_factory=lambda: MappingProxyType({}))

    def of(self, options: type[_Options]) -> _Options:
        """The options of class ``options`` (its defaults where the run has no such feature)."""
        found = self.features.get(options)
        return found if found is not None else options()

    def with_features(self, features: Mapping[type, Any]) -> CheckOptions:
        return replace(self, features=MappingProxyType(dict(features)))

    def with_values(self, values: Mapping[str, Any]) -> CheckOptions:
        """These options with ``values`` by keyword applied (already checked)."""
        core = {item.name for item in fields(CoreOptions)}
        features = dict(self.features)
        for cls, current in self.features.items():
            own = {item.name for item in fields(cls)}
            given = {name: value for name, value in values.items() if name in own}
            if given:
                features[cls] = replace(current, **given)
        chosen = replace(self, **{name: v for name, v in values.items() if name in core})
        return chosen.with_features(features)

    def as_dict(self) -> dict[str, Any]:
        """Every option's value by keyword, the core's and each feature's."""
        found = {item.name: getattr(self, item.name) for item in fields(CoreOptions)}
        for options in self.features.values():
            found.update({item.name: getattr(options, item.name) for item in fields(options)})
        return found
