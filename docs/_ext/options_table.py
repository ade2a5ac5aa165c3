"""The options page's table as Markdown lines, one row per entry of ``rows()``, written into
``docs/options.md`` between :data:`BEGIN` and :data:`END`, so that the page reads as plain
Markdown too (in a clone, on the repository host).

Pure: no Sphinx. ``tests/core/test_docs.py`` fails where the page's table is not the one
:func:`page_with_table` writes, and writes it under ``AOTI_REGENERATE_LISTINGS=1``; the site's
build warns (an error under ``-W``) through ``aoti_options.py``.
"""

from __future__ import annotations

from pytest_aoti.options.option import Option
from pytest_aoti.plugins import default_catalog

BEGIN = (
    "<!-- begin: the options table, written from the option rows by tests/core/test_docs.py "
    "(AOTI_REGENERATE_LISTINGS=1); do not edit -->"
)
END = "<!-- end: the options table -->"
REGENERATE = "rerun tests/core/test_docs.py with AOTI_REGENERATE_LISTINGS=1"


def flag(option: Option) -> str | None:
    """The command-line flag, None for an ini-only or keyword-only option."""
    if option.parse is None or not (option.cli or option.flag):
        return None
    return f"--{option.name}"


def shown_default(option: Option) -> str:
    value = option.default
    if option.flag or isinstance(value, bool):
        return "on" if value else "off"
    if value is None or value == ():
        return "none"
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    if isinstance(value, int) and "size" in option.name and value >= 2**30:
        return f"{value // 2**30}GiB"
    return str(value)


def places(option: Option, name: str) -> list[str]:
    """Where else the option entered as ``name`` is set: its ini key, the marker's and
    ``aoti.check``'s keyword."""
    found = []
    ini = option.ini_key if option.parse is not None else None
    if ini and ini != name:
        found.append(f"ini `{ini}`")
    keyword_of = [
        target
        for target, on in (("`@pytest.mark.aoti`", option.marker), ("`aoti.check`", option.keyword))
        if on
    ]
    if keyword_of:
        keyword = f"{option.keyword_name}="
        what = "a keyword" if keyword == name else f"`{keyword}`"  # a keyword-only option
        found.append(f"{what} of {' and '.join(keyword_of)}")
    return found


def options_markdown() -> list[str]:
    """The page's list, one entry per entry of ``rows()``: the flag (or, for an option
    without one, its ini key or keyword), where else it is set, its default and its help."""
    lines = []
    for option in default_catalog().rows():
        ini = option.ini_key if option.parse is not None else None
        name = flag(option) or ini or f"{option.keyword_name}="
        said = places(option, name)
        if "Default:" not in option.help:  # the help says it where the value needs words
            said.append(f"default `{shown_default(option)}`")
        where = f" ({'; '.join(said)})" if said else ""
        lines.append(f"- **`{name}`**{where}: " + option.help.replace("\n", " "))
    return lines


def page_with_table(text: str) -> str:
    """``text`` (the options page) with the table between :data:`BEGIN` and :data:`END`
    written from the rows; ``ValueError`` where the page lacks either line."""
    lines = text.splitlines(keepends=True)
    stripped = [line.rstrip("\n") for line in lines]
    if stripped.count(BEGIN) != 1 or stripped.count(END) != 1:
        raise ValueError(f"the options page must hold the lines {BEGIN!r} and {END!r} once each")
    start, end = stripped.index(BEGIN), stripped.index(END)
    if end < start:
        raise ValueError(f"the options page has {END!r} before {BEGIN!r}")
    table = "".join(f"{line}\n" for line in ["", *options_markdown(), ""])
    return "".join(lines[: start + 1]) + table + "".join(lines[end:])
