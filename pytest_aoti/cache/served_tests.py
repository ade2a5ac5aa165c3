"""Which tests' programs the engine child served on their last run (a large package's way),
so a test's next run starts the child at its setup, and loads that program's package there,
while the test builds its model, rather than at its check. One file per test id in the cache,
holding the program's key: no two xdist workers write one."""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path

from pytest_aoti.atomic_files import replace_text

FOLDER = "served-tests"
"""Where the markers live under the cache's root."""


class ServedTests:
    """The markers of one cache root."""

    def __init__(self, root: Path) -> None:
        self.root = root / FOLDER

    def served_before(self, nodeid: str) -> str | None:
        """The key of the program the engine child served ``nodeid`` on its last run; None
        where it served none."""
        try:
            key = self._path(nodeid).read_text(encoding="ascii").strip()
        except (OSError, ValueError):
            return None
        return key if key.isalnum() else None

    def any(self) -> bool:
        """Whether any test's marker is kept."""
        try:
            return any(self.root.iterdir())
        except OSError:
            return False

    def note(self, nodeid: str, key: str | None) -> None:
        """Record the key of the program the engine child served ``nodeid`` this run (None:
        it served none); written only when that changes."""
        path = self._path(nodeid)
        with contextlib.suppress(OSError):  # a hint about when to start the child, no more
            if key is None:
                path.unlink(missing_ok=True)
            elif self.served_before(nodeid) != key:
                self.root.mkdir(parents=True, exist_ok=True)
                replace_text(path, key)

    def _path(self, nodeid: str) -> Path:
        digest = hashlib.sha256(nodeid.encode("utf-8", "surrogatepass")).hexdigest()[:24]
        return self.root / digest
