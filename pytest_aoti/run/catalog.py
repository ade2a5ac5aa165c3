"""The checks every ``aoti.check`` runs, phase by phase and in order within a phase: the
first that fails ends the check.

The core checks, then each feature's (its plugin's ``pytest_aoti_checks``, in the order of
:data:`~pytest_aoti.features.FEATURES`: generated shapes, then deployment probes, which
judge a program that passed every check of the example), then timing, which measures only
a program that passed everything else. A core check is a module of
:mod:`pytest_aoti.checks` with one :class:`~pytest_aoti.checks.base.Check` (its ``phase``
says when it runs) and its line here, its options fields of
:class:`~pytest_aoti.options.check_options.CoreOptions`; a feature's check is listed by its
feature alone.
"""

from __future__ import annotations

from importlib import import_module

from pytest_aoti import features
from pytest_aoti.checks.aliasing import AliasingCheck
from pytest_aoti.checks.base import Check
from pytest_aoti.checks.crash_screen import CrashScreenCheck
from pytest_aoti.checks.eager import EagerCheck
from pytest_aoti.checks.memory import MemoryCheck
from pytest_aoti.checks.parity import ParityCheck
from pytest_aoti.checks.random_verdict import NotRandomCheck, RandomCheck
from pytest_aoti.checks.signature import SignatureCheck
from pytest_aoti.checks.threads import ThreadsCheck
from pytest_aoti.checks.timing import TimingCheck

CORE: list[Check] = [
    EagerCheck(),  # "eager": the example in eager PyTorch, before anything is exported
    NotRandomCheck(),  # "exported": a program that draws random numbers fails uncompiled
    SignatureCheck(),  # "engine" from here on
    CrashScreenCheck(),  # before the test process first calls the engine
    RandomCheck(),  # random="shapes": what can be compared; no value check applies to it
    ParityCheck(),
    AliasingCheck(),
    MemoryCheck(),
    ThreadsCheck(),
]
LAST: list[Check] = [TimingCheck()]


def feature_checks() -> list[Check]:
    """Every feature's checks: its plugin's ``pytest_aoti_checks``, in feature order (the
    same implementation pytest registered; the session leaves it out of the added checks)."""
    made: list[Check] = []
    for name in features.plugins():
        hook = getattr(import_module(name), "pytest_aoti_checks", None)
        if hook is not None:
            made.extend(hook())
    return made


CHECKS: list[Check] = [*CORE, *feature_checks(), *LAST]
"""The built-in checks, in order."""
