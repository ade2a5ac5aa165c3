"""The keywords each place of a test accepts, and the usage error for one it does not.

``@pytest.mark.aoti`` takes the marker options; ``aoti.check`` takes ``kwargs``, the
keywords that say what the call checks and every ``aoti.check`` option; ``aoti.compile``
takes its own few. An unknown keyword is refused before anything is exported, with the
closest accepted ones and the full list.

Pure logic without torch.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pytest_aoti.errors import AotiUsageError
from pytest_aoti.options import table


def _none() -> tuple[str, ...]:
    return ()


@dataclass(frozen=True)
class Place:
    """Where a test passes keywords: the keywords of the call itself and its options'."""

    title: str
    """How the message names it: ``@pytest.mark.aoti``, ``aoti.check()``."""
    call: tuple[str, ...]
    """The keywords of the call's own signature, besides module and args."""
    options: Callable[[], tuple[str, ...]] = _none
    """The option rows' keywords it takes (read when asked: features add rows)."""

    def accepted(self) -> tuple[str, ...]:
        """Every keyword it accepts, the call's first."""
        return (*self.call, *self.options())


MARKER = Place("@pytest.mark.aoti", (), table.marker_options)
CHECK = Place(
    "aoti.check()",
    ("kwargs", "mutates", "mutated_buffers", "calls", "samples", "dynamic_shapes"),
    table.keyword_options,
)
COMPILE = Place("aoti.compile()", ("kwargs", "dynamic_shapes", "strict", "inductor_configs"))
PLACES = (MARKER, CHECK, COMPILE)


def refuse_unknown(place: Place, unknown: Iterable[str]) -> None:
    """Raise :class:`~pytest_aoti.errors.AotiUsageError` for the keywords ``unknown``
    passed at ``place``, if any."""
    __tracebackhide__ = True
    names = sorted(set(unknown))
    if names:
        raise AotiUsageError(unknown_message(place, names))


def unknown_message(place: Place, unknown: list[str]) -> str:
    """``TITLE got unknown option(s) NAMES; allowed: ALL. Did you mean ...?``, and where
    else a name is a keyword."""
    accepted = place.accepted()
    close = {name: difflib.get_close_matches(name, accepted, n=3, cutoff=0.7) for name in unknown}
    hints = [" or ".join(found) for found in close.values() if found]
    if len(unknown) > 1:
        hints = [f"{' or '.join(found)} for {name}" for name, found in close.items() if found]
    said = [f" Did you mean {', '.join(hints)}?"] if hints else []
    for name in unknown:
        others = [
            other.title for other in PLACES if other is not place and name in other.accepted()
        ]
        if others:
            said.append(f" {name} is a keyword of {' and '.join(others)}, not of {place.title}.")
    given, listed = ", ".join(unknown), ", ".join(accepted)
    return f"{place.title} got unknown option(s) {given}; allowed: {listed}.{''.join(said)}"
