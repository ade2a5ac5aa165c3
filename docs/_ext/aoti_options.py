"""The options page's table is written into ``docs/options.md`` (``options_table.py``); the
build warns, an error under ``sphinx-build -W``, where the written table is not the one the
option rows make, so the site cannot go out with a stale one."""

from __future__ import annotations

from typing import Any

from options_table import REGENERATE, page_with_table
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

PAGE = "options"


def check_written_table(app: Sphinx, docname: str, source: list[str]) -> None:
    """Warn where the options page's written table differs from the rows'."""
    if docname != PAGE:
        return
    try:
        current = page_with_table(source[0])
    except ValueError as error:
        logger.warning("%s", error, location=docname)
        return
    if current != source[0]:
        logger.warning(
            "the options table differs from what the option rows make: %s",
            REGENERATE,
            location=docname,
        )


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("source-read", check_written_table)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
