"""The options page's table, made from ``pytest_aoti.options.table.rows()`` at build time.

``{aoti-options}`` in a page becomes one row per option: its flag, ini key, the marker's and
``aoti.check``'s keyword, its default and its help, so the page cannot drift from the code.
"""

from __future__ import annotations

from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from options_table import options_markdown
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


class OptionsTable(SphinxDirective):
    """Insert the table of every option."""

    has_content = False

    def run(self) -> list[Any]:
        # parsed as the page's own Markdown (MyST), so code spans render as elsewhere
        container = nodes.container()
        content = StringList(options_markdown(), source="pytest_aoti.options.table.rows()")
        self.state.nested_parse(content, self.content_offset, container)
        return list(container.children)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("aoti-options", OptionsTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
