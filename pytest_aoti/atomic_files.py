"""One atomic text write, for every file the plugin keeps across runs."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def replace_text(path: Path, text: str, *, sync: bool = False) -> None:
    """Write ``text`` to ``path`` atomically (temp file, rename; ``sync``: fsync first)."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            if sync:
                file.flush()
                os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
