"""One option's row: where it can be set, how it is parsed and checked, its default.

Pure data without torch. The rows of the core options are in
:mod:`pytest_aoti.options.table`; a feature declares its own (``<feature>/feature.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Option:
    """One option: where it can be set, how it is parsed and checked, its default.

    - ``parse`` set: a command-line option ``--<name>`` (unless ``cli`` is False) and an ini
      key; otherwise a marker or ``aoti.check`` keyword only;
    - ``marker``: also a keyword of ``@pytest.mark.aoti`` (listed in its help line);
    - ``keyword``: also a keyword of ``aoti.check``;
    - ``many``: repeatable (``--aoti-model=A --aoti-model=B``, a tuple), its ini key a line
      list; ``ini``: another ini key, or None for a command-line-only option; ``flag``: a
      switch without a value (``parse`` reads its ini twin, if any).

    The marker and ``aoti.check`` keyword is :attr:`keyword_name`: the name without
    ``aoti-``, with underscores; for a per-check option also its ``CheckOptions`` field.
    """

    name: str
    parse: Callable[[str], Any] | None
    """Command-line and ini text to value; None for an option that is neither."""
    default: Any
    help: str
    field: str = ""
    """The :class:`~pytest_aoti.options.settings.AotiSettings` field; by default the name
    without ``aoti-``."""
    check: Callable[[str, Any], Any] | None = None
    """A marker's or ``aoti.check``'s value, given the keyword, as the check reads it;
    raises :class:`~pytest_aoti.options.values.ValueProblem` with what is wrong."""
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
    per_check: bool = False
    """A field of ``CheckOptions``: its command-line and ini value is
    ``AotiSettings.checks``'s, and every check reads it (``plan.options.NAME``)."""

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def attribute(self) -> str:
        """The ``AotiSettings`` field of a session option (``AotiSettings.checks``' field of a
        per-check one)."""
        return self.field or self.dest.removeprefix("aoti_")

    @property
    def keyword_name(self) -> str:
        """The marker's and ``aoti.check``'s keyword."""
        return self.name.removeprefix("aoti-").replace("-", "_")

    @property
    def ini_key(self) -> str | None:
        """The ini key, None for a command-line-only option."""
        return self.dest if self.ini == "" else self.ini
