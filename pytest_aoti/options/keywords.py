"""The keywords ``@pytest.mark.aoti``, ``aoti.check`` and ``aoti.compile`` accept, and the usage
error, raised before any export, for one they do not. No torch."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pytest_aoti.errors import AotiUsageError
from pytest_aoti.options.catalog import CALL_ARGUMENTS, Catalog


def _none(catalog: Catalog) -> tuple[str, ...]:
    return ()


@dataclass(frozen=True)
class Place:
    """Where a test passes keywords: the keywords of the call itself and its options'."""

    title: str
    """How the message names it: ``@pytest.mark.aoti``, ``aoti.check()``."""
    call: tuple[str, ...]
    """The keywords of the call's own signature, besides module and args."""
    options: Callable[[Catalog], tuple[str, ...]] = _none
    """The option rows' keywords it takes of a run's catalog (features add rows)."""

    def accepted(self, catalog: Catalog) -> tuple[str, ...]:
        """Every keyword it accepts in a run of ``catalog``, the call's first."""
        return (*self.call, *self.options(catalog))


MARKER = Place("@pytest.mark.aoti", (), Catalog.marker_options)
CHECK = Place(
    "aoti.check()",
    ("kwargs", *CALL_ARGUMENTS),
    Catalog.keyword_options,
)
COMPILE = Place("aoti.compile()", ("kwargs", "dynamic_shapes", "strict", "inductor_configs"))
PLACES = (MARKER, CHECK, COMPILE)


def refuse_unknown(place: Place, unknown: Iterable[str], catalog: Catalog) -> None:
    """Raise :class:`~pytest_aoti.errors.AotiUsageError` for ``unknown`` keywords at ``place``
    in a run of ``catalog``."""
    __tracebackhide__ = True
    names = sorted(set(unknown))
    if not names:
        return
    blocked = catalog.blocked
    for name in names:
        if name in blocked:
            raise AotiUsageError(
                f"{place.title}: {name} is an option of the {blocked[name]} plugin, which "
                f"this run blocks: drop the option, or -p no:{blocked[name]} from the command line"
            )
    raise AotiUsageError(unknown_message(place, names, catalog))


def unknown_message(place: Place, unknown: list[str], catalog: Catalog) -> str:
    """``TITLE got unknown option(s) ...; allowed: ...``, close matches, where else it fits."""
    accepted = place.accepted(catalog)
    close = {name: difflib.get_close_matches(name, accepted, n=3, cutoff=0.7) for name in unknown}
    hints = [" or ".join(found) for found in close.values() if found]
    if len(unknown) > 1:
        hints = [f"{' or '.join(found)} for {name}" for name, found in close.items() if found]
    said = [f" Did you mean {', '.join(hints)}?"] if hints else []
    for name in unknown:
        others = [
            other.title
            for other in PLACES
            if other is not place and name in other.accepted(catalog)
        ]
        if others:
            said.append(f" {name} is a keyword of {' and '.join(others)}, not of {place.title}.")
    given, listed = ", ".join(unknown), ", ".join(accepted)
    return f"{place.title} got unknown option(s) {given}; allowed: {listed}.{''.join(said)}"
