"""Warnings raised while pytest-aoti exports and compiles: whose are they?

A warning that torch (or the model's library) raises from its own frames while the plugin
exports, decomposes or compiles is about torch, not about the user's code: under
``filterwarnings = error`` it would fail a correct check. Such warnings are recorded and
shown in the terminal summary and the JSON report. A warning raised from the user's own
code is issued again at its own file and line, so the user's filters decide, as always.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Callable, Iterator

# torch's notes about its own deprecations: not worth a line in the summary
_QUIET = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)
_INSTALLED = re.compile(r"[/\\](site|dist)-packages[/\\]")


@contextlib.contextmanager
def library_warnings_recorded(note: Callable[[str], None]) -> Iterator[None]:
    """Record warnings raised inside the block: library ones go to ``note`` as one line
    each, user ones are re-issued with :func:`warnings.warn_explicit` after the block."""
    from pytest_aoti.frames import is_library_file

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            # restored below, after catch_warnings puts the user's filters back
            recorded = list(caught)
    for item in recorded:
        # torch, Python, or an installed package (the model's library): not the user's code
        if is_library_file(item.filename) or _INSTALLED.search(item.filename):
            if not issubclass(item.category, _QUIET) and not _ignored(item):
                first = str(item.message).strip().splitlines()
                text = first[0] if first else ""
                note(f"{item.category.__name__} from {item.filename}:{item.lineno}: {text}")
            continue
        warnings.warn_explicit(
            item.message, item.category, item.filename, item.lineno, source=item.source
        )


def _ignored(item: warnings.WarningMessage) -> bool:
    """Whether the user's filters ignore this warning (then it is no note either)."""
    import os

    text = str(item.message)
    names = (
        os.path.splitext(item.filename)[0],
        os.path.splitext(os.path.basename(item.filename))[0],
    )
    for action, message, category, module, lineno in warnings.filters:
        if message is not None and not message.match(text):
            continue
        if not issubclass(item.category, category):
            continue
        if module is not None and not any(module.match(name) for name in names):
            continue
        if lineno and lineno != item.lineno:
            continue
        return bool(action == "ignore")
    return False
