"""Options as fields of frozen dataclasses, a field's metadata its row: :func:`per_check` fields
are read on ``plan.options``, :func:`session_field` fields on the session's settings. No torch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import Field, field, fields
from typing import Any

from pytest_aoti.options.option import Option
from pytest_aoti.options.parsers import ValueKind, Words

ROW = "pytest_aoti.option"
"""The metadata key of a per-check field's row facets."""

SESSION_ROW = "pytest_aoti.session_option"
"""The metadata key of a session field's :class:`~pytest_aoti.options.option.Option`."""


def per_check(
    default: Any,
    help: str,
    *,
    kind: ValueKind | Words | None = None,
    parse: Callable[[str], Any] | None = None,
    check: Callable[[str, Any], Any] | None = None,
    marker: bool = False,
    keyword: bool = False,
    flag: bool = False,
) -> Any:
    """A per-check option's field and its row. ``parse``: text to value (the option is then
    ``--aoti-NAME`` and ini ``aoti_NAME``); ``flag``: a switch; ``marker`` / ``keyword``: also a
    keyword of ``@pytest.mark.aoti`` / ``aoti.check``; ``check``: a marker's or call's value;
    ``kind``: both (a :class:`~pytest_aoti.api.ValueKind`, or a vocabulary of
    :meth:`ValueKind.words <pytest_aoti.api.ValueKind.words>`), where ``parse`` and ``check`` are not given."""
    if kind is not None:
        parse, check = parse or kind.parse, check or kind.check
    facets = dict(parse=parse, help=help, check=check, marker=marker, keyword=keyword, flag=flag)
    return field(default=default, metadata={ROW: facets})


def session_field(option: Option) -> Any:
    """A session option's field: ``option``'s default, with ``option`` as its row."""
    return field(default=option.default, metadata={SESSION_ROW: option})


def per_check_fields(options: type) -> tuple[Field[Any], ...]:
    """The per-check option fields of dataclass ``options``, in order."""
    return tuple(item for item in fields(options) if ROW in item.metadata)


def per_check_rows(options: type) -> tuple[Option, ...]:
    """The rows of the per-check options of dataclass ``options``, in field order."""
    made = []
    for item in per_check_fields(options):
        facets = dict(item.metadata[ROW])
        name = f"aoti-{item.name.replace('_', '-')}" if facets["parse"] else item.name
        made.append(Option(name, default=item.default, per_check=True, **facets))
    return tuple(made)


def session_rows(settings: type) -> tuple[Option, ...]:
    """The session rows of dataclass ``settings``, in field order."""
    made = []
    for item in fields(settings):
        option = item.metadata.get(SESSION_ROW)
        if option is None:
            continue
        if option.attribute != item.name:
            raise TypeError(f"option --{option.name} is field {item.name!r}: give it field=")
        made.append(option)
    return tuple(made)
