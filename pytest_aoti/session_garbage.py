"""The end of a session's garbage collections, paid once.

pytest collects garbage as a session ends so that what a finalizer raises is reported
(pytest 9.2 twice, in its ``pytest_unconfigure`` and in its last cleanup; 8.4 five times, in
that cleanup). Each full collection walks every object alive: after a compile, the half
million that torch and Inductor keep in their modules, a quarter of a second each on 2
cores. The session collects once where pytest would, then freezes what is still alive
(:func:`gc.freeze`), so that pytest's collections walk only what is made after; a cleanup
that runs after pytest's own undoes the freeze."""

from __future__ import annotations

import gc
import sys

import pytest


def undo_freeze_after_pytest(config: pytest.Config) -> None:
    """At configure time: register the cleanup that undoes :func:`collect_and_freeze`.
    pluggy calls this plugin's configure before those of pytest's own plugins (registered
    earlier), so this cleanup is registered before pytest's and, cleanups running last
    registered first, runs after the one that collects."""
    config.stash[_FROZE] = False

    def undo() -> None:
        if config.stash.get(_FROZE, False):
            gc.unfreeze()  # a process that goes on (pytest.main) collects as before

    config.add_cleanup(undo)


def collect_and_freeze(config: pytest.Config) -> None:
    """At the session's end, after its own teardown: one full collection, reported as
    pytest's is, then the survivors frozen. Nothing is done where pytest collects nothing
    at the end (an in-process run of pytester, ``-p no:unraisableexception``, a pytest
    without these collections), or where something else froze objects (its freeze is its
    own to undo)."""
    if _FROZE not in config.stash or gc.get_freeze_count() or not _pytest_collects_at_end(config):
        return
    gc.collect()
    gc.freeze()
    config.stash[_FROZE] = True


def _pytest_collects_at_end(config: pytest.Config) -> bool:
    if not config.pluginmanager.has_plugin("unraisableexception"):  # -p no:unraisableexception
        return False
    unraisable = sys.modules.get("_pytest.unraisableexception")
    iterations = getattr(unraisable, "gc_collect_iterations_key", None)
    if iterations is None:  # a pytest that does not collect at the end
        return False
    return bool(config.stash.get(iterations, 1))


_FROZE = pytest.StashKey[bool]()
"""Whether the session froze objects; absent where its configure did not run."""
