"""One option's row: where it can be set, how it is parsed and checked, its default. No torch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Option:
    """One option. With ``parse``: a command-line option ``--<name>`` (unless ``cli`` is False)
    and an ini key, else a keyword only; ``marker`` / ``keyword``: also a keyword of
    ``@pytest.mark.aoti`` / ``aoti.check`` (:attr:`keyword_name`); ``many``: repeatable (a tuple;
    an ini line list); ``ini``: another ini key, or None for none; ``flag``: a switch."""

    name: str
    parse: Callable[[str], Any] | None
    """Command-line and ini text to value; None for an option that is neither."""
    default: Any
    help: str
    field: str = ""
    """The ``AotiSettings`` field; by default the name without ``aoti-``."""
    check: Callable[[str, Any], Any] | None = None
    """A marker's or call's value, given the keyword, as the check reads it; raises ValueProblem."""
    path: str = ""
    """``dir`` or ``file``: a path made absolute against the rootdir and checked writable
    at startup; ``location``: made absolute only (its user copes with it being unusable)."""
    cli: bool = True
    """False for ini-only options (values that are awkward on a command line)."""
    marker: bool = False
    keyword: bool = False
    many: bool = False
    ini: str | None = ""
    """The ini key; by default the ``dest``; None for a command-line-only flag."""
    flag: bool = False
    secret: bool = False
    """A value that may carry a credential (a store's URL): a bad one is never echoed."""
    per_check: bool = False
    """A field of ``CheckOptions`` (in ``AotiSettings.checks``; checks read ``plan.options.NAME``)."""

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def attribute(self) -> str:
        """The ``AotiSettings`` field of the option (of ``AotiSettings.checks`` if per-check)."""
        return self.field or self.dest.removeprefix("aoti_")

    @property
    def keyword_name(self) -> str:
        """The marker's and ``aoti.check``'s keyword."""
        return self.name.removeprefix("aoti-").replace("-", "_")

    @property
    def ini_key(self) -> str | None:
        """The ini key, None for a command-line-only option."""
        return self.dest if self.ini == "" else self.ini
