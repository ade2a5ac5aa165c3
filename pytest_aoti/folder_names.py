"""Filesystem-safe folder names for pytest node ids."""

from __future__ import annotations

import hashlib
import re

MAX_NAME_LENGTH = 150
"""Longest folder name :func:`bundle_dir_name` returns, hash suffix included."""

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]", re.ASCII)


def bundle_dir_name(nodeid: str) -> str:
    """A filesystem-safe folder name for a node id: ``tests/test_m.py::test_x[cpu]`` is
    ``tests_test_m.py__test_x-cpu-``. Where replacing characters is lossy or the name exceeds
    :data:`MAX_NAME_LENGTH`, a hash of the id keeps distinct ids distinct."""
    readable = nodeid.replace("::", "__").replace("/", "_").replace("\\", "_")
    readable = readable.replace("[", "-").replace("]", "-")
    safe = _UNSAFE.sub("_", readable)
    lossy = safe != readable
    if not safe or safe.startswith("."):
        # "", "." and ".." are not folders of their own; a leading dot would hide the folder
        safe = "_" + safe
        lossy = True
    if not lossy and len(safe) <= MAX_NAME_LENGTH:
        return safe
    suffix = "-" + hashlib.sha256(nodeid.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return safe[: MAX_NAME_LENGTH - len(suffix)] + suffix
