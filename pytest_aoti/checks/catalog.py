"""The checks every ``aoti.check`` runs, in order: the first that fails ends the check.

Adding a check: a module with one :class:`~pytest_aoti.checks.base.Check`, and its line
here; its options are rows of :data:`pytest_aoti.settings.OPTIONS`. Deployment probes come
after every check of the example (they judge a program that passed them); timing stays
last: it measures only a program that passed everything else.
"""

from __future__ import annotations

from pytest_aoti.checks.aliasing import AliasingCheck
from pytest_aoti.checks.base import Check
from pytest_aoti.checks.declared import SignatureCheck
from pytest_aoti.checks.generated import GeneratedCheck
from pytest_aoti.checks.memory import MemoryCheck
from pytest_aoti.checks.parity import ParityCheck
from pytest_aoti.checks.probes import ProbesCheck
from pytest_aoti.checks.randomness import RandomCheck
from pytest_aoti.checks.threads import ThreadsCheck
from pytest_aoti.checks.timing import TimingCheck

CHECKS: list[Check] = [
    SignatureCheck(),
    RandomCheck(),  # a random program: judged here; no value check applies to it
    ParityCheck(),
    AliasingCheck(),
    MemoryCheck(),
    ThreadsCheck(),
    GeneratedCheck(),
    ProbesCheck(),
    TimingCheck(),
]
