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
    check_layouts,
    check_share,
    check_switch,
    parse_layouts,
    parse_share,
    parse_switch,
)

DEFAULT_SHARE = 0.05
"""The ``budget`` option's default: a large program's searches read it at most 1.25 GiB's worth
of calls at it, and another value scales that (:mod:`~pytest_aoti.checks.budget`)."""


@dataclass(frozen=True)
class CoreOptions:
    """The per-check options of the core checks."""

    random: str = per_check(
        "fail",
        "A program that draws random numbers (dropout in training mode, rand, bernoulli, "
        "...): fail its check, or compare shapes (output shapes and dtypes, and the values "
        "of outputs no random op feeds). Default: fail.",
        kind=RANDOM_MODES,
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
        "How deep a large program's searches go (values draws, deployment probes, generated "
        "shapes, weight sets, the C++ loader's input sets), decided from its size, never the "
        "clock: a program below 32 MiB (weights and example) runs every search in full; a "
        "larger one's searches read it at most 1.25 GiB's worth of calls at the default, "
        "scaled by this number against the default (0.1 doubles it), and a later run "
        "continues what one left out; off: every search in full. A count given for a search "
        "(values_draws, examples) is never shortened. A number such as 0.1, or a percentage "
        f"written with a percent sign. Default: {DEFAULT_SHARE}.",
        parse=parse_share,
        check=check_share,
        marker=True,
        keyword=True,
    )
    layouts: tuple[str, ...] = per_check(
        (),
        "Memory layouts the deployment feeds the program: compile it once more from the "
        "example relaid in each (channels_last: 4-D inputs, channels_last_3d: 5-D, permuted: "
        "the last two dims of 2-D and up) and run the whole check on that program too; a "
        "comma list such as channels_last,permuted, or none. A layout no input takes is "
        "skipped with a note. Default: none.",
        parse=parse_layouts,
        check=check_layouts,
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
    given: frozenset[str] = frozenset()
    """The options the user gave (command line, ini file, marker or call keyword), by
    keyword: a count given is never shortened by the check budget."""

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
        chosen = replace(
            self,
            given=self.given | frozenset(values),
            **{name: v for name, v in values.items() if name in core},
        )
        return chosen.with_features(features)

    def gave(self, name: str) -> bool:
        """Whether the user gave option ``name`` (by keyword)."""
        return name in self.given

    def as_dict(self) -> dict[str, Any]:
        """Every option's value by keyword, the core's and each feature's."""
        found = {item.name: getattr(self, item.name) for item in fields(CoreOptions)}
        for options in self.features.values():
            found.update({item.name: getattr(options, item.name) for item in fields(options)})
        return found
