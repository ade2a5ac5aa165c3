"""Sphinx configuration of the pytest-aoti documentation (``sphinx-build -W docs docs/_build``)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE / "_ext"), str(HERE.parent)]

project = "pytest-aoti"
author = "the pytest-aoti authors"
copyright = "2026, the pytest-aoti authors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "aoti_options",
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "_*.md"]
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
# option names such as --aoti-export stay two hyphens, never an en dash
smartquotes = False
html_theme = "furo"
html_title = "pytest-aoti"
html_static_path: list[str] = []

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"
# the fixture makes the tester: its constructor is not what users call
autodoc_class_signature = "separated"
autodoc_default_options = {"members": True, "show-inheritance": False}
# the docs are built offline: no intersphinx, and a reference to torch's or pytest's types
# stays plain text instead of a warning
nitpicky = False
suppress_warnings = ["myst.strikethrough"]
