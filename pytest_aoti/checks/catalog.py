"""The checks every ``aoti.check`` runs, phase by phase and in order within a phase: the
first that fails ends the check.

Adding a check: a module with one :class:`~pytest_aoti.checks.base.Check` (its ``phase``
says when it runs), and its line here; its options are fields of
:class:`~pytest_aoti.options.check_options.CheckOptions`. Deployment probes come after every
check of the example (they judge a program that passed them); timing stays last: it
measures only a program that passed everything else.
"""

from __future__ import annotations

from pytest_aoti.checks.aliasing import AliasingCheck
from pytest_aoti.checks.base import Check
from pytest_aoti.checks.crash_screen import CrashScreenCheck
from pytest_aoti.checks.eager import EagerCheck
from pytest_aoti.checks.generated import GeneratedCheck
from pytest_aoti.checks.memory import MemoryCheck
from pytest_aoti.checks.parity import ParityCheck
from pytest_aoti.checks.probes.check import ProbesCheck
from pytest_aoti.checks.random_verdict import NotRandomCheck, RandomCheck
from pytest_aoti.checks.signature import SignatureCheck
from pytest_aoti.checks.threads import ThreadsCheck
from pytest_aoti.checks.timing import TimingCheck

CHECKS: list[Check] = [
    EagerCheck(),  # "eager": the example in eager PyTorch, before anything is exported
    NotRandomCheck(),  # "exported": a program that draws random numbers fails uncompiled
    SignatureCheck(),  # "engine" from here on
    CrashScreenCheck(),  # before the test process first calls the engine
    RandomCheck(),  # random="shapes": what can be compared; no value check applies to it
    ParityCheck(),
    AliasingCheck(),
    MemoryCheck(),
    ThreadsCheck(),
    GeneratedCheck(),
    ProbesCheck(),
    TimingCheck(),
]
