"""The manual's listings (``docs/_listings``): output the tests produce, kept as the pages
show it. A test compares its output with the kept listing, figures masked, and writes the
listing again under ``AOTI_REGENERATE_LISTINGS=1``."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

LISTINGS = Path(__file__).resolve().parent.parent / "docs" / "_listings"


def mask_figures(line: str) -> str:
    """A line with its numbers masked: torch releases differ in the last digits."""
    return re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", line)


def assert_listing(
    lines: list[str], listing: Path, masked: Callable[[str], str] = mask_figures
) -> None:
    """``lines`` against the kept ``listing``, line by line through ``masked``."""
    text = "\n".join(line.rstrip() for line in lines) + "\n"
    if os.environ.get("AOTI_REGENERATE_LISTINGS") == "1":
        listing.parent.mkdir(exist_ok=True)
        listing.write_text(text, encoding="utf-8")
    kept = listing.read_text(encoding="utf-8").splitlines()
    assert [masked(line) for line in kept] == [masked(line) for line in text.splitlines()], (
        f"the output docs/_listings/{listing.name} shows changed: rerun this test with "
        "AOTI_REGENERATE_LISTINGS=1"
    )
