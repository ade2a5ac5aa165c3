"""The options page's table as Markdown lines, one row per entry of ``rows()``.

Pure: no Sphinx, so the tests read the same rows the built page shows.
"""

from __future__ import annotations

from pytest_aoti.options.option import Option
from pytest_aoti.options.table import rows


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


def where(option: Option) -> str:
    """Where else it is set: the ini key, the marker and ``aoti.check`` keyword."""
    places = []
    ini = option.ini_key if option.parse is not None else None
    if ini:
        places.append(f"ini `{ini}`")
    keyword_of = [
        name
        for name, on in (("`@pytest.mark.aoti`", option.marker), ("`aoti.check`", option.keyword))
        if on
    ]
    if keyword_of:
        places.append(f"`{option.keyword_name}=` of {' and '.join(keyword_of)}")
    return "; ".join(places)


def options_markdown() -> list[str]:
    """The page's list, one entry per entry of ``rows()``: the flag (or, for an option
    without one, its ini key or keyword), where else it is set, its default and its help."""
    lines = []
    for option in rows():
        ini = option.ini_key if option.parse is not None else None
        name = flag(option) or ini or f"{option.keyword_name}="
        places = [
            place.replace(f"`{name}` of", "a keyword of")  # a keyword-only option
            for place in where(option).split("; ")
            if place and place != f"ini `{name}`"
        ]
        if "Default:" not in option.help:  # the help says it where the value needs words
            places.append(f"default `{shown_default(option)}`")
        said = f" ({'; '.join(places)})" if places else ""
        lines.append(f"- **`{name}`**{said}: " + option.help.replace("\n", " "))
    return lines
