"""Every option of a run as one row: command line, ini twin, marker and ``aoti.check``
keyword. Pure logic without torch: parsing here makes a bad value a usage error at startup."""

from __future__ import annotations

import pytest

from pytest_aoti.options.check_options import CoreOptions
from pytest_aoti.options.core_rows import FIRST, SESSION
from pytest_aoti.options.fields import per_check_rows
from pytest_aoti.options.option import Option


def core_rows() -> tuple[Option, ...]:
    """The core's options: the session's and the core checks' (no feature's)."""
    return (*FIRST, *per_check_rows(CoreOptions), *SESSION)


def add_options(parser: pytest.Parser, options: tuple[Option, ...]) -> None:
    """Register the ``--aoti-*`` options and ini keys of ``options`` in the ``aoti`` group."""
    group = parser.getgroup("aoti", "AOTInductor checks (pytest-aoti)")
    for option in options:
        if option.parse is None:  # a marker or aoti.check keyword only
            continue
        if option.flag:
            group.addoption(
                f"--{option.name}", dest=option.dest, action="store_true", help=option.help
            )
        elif option.cli:
            group.addoption(
                f"--{option.name}",
                dest=option.dest,
                type=option.parse,
                default=None,
                action="append" if option.many else "store",
                metavar=option.dest.upper().removeprefix("AOTI_"),
                help=option.help,
            )
        if option.ini_key is not None:
            if option.many:
                parser.addini(option.ini_key, help=option.help, type="linelist", default=None)
            else:
                parser.addini(option.ini_key, help=option.help, default=None)
