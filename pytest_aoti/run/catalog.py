"""The core checks every ``aoti.check`` runs, phase by phase and in order within a phase
(the first that fails ends the check); the ``pytest_aoti_checks`` hook's run after them."""

from __future__ import annotations

from pytest_aoti.checks.aliasing import AliasingCheck
from pytest_aoti.checks.base import Check
from pytest_aoti.checks.crash_screen import CrashScreenCheck
from pytest_aoti.checks.eager import EagerCheck
from pytest_aoti.checks.parity import ParityCheck
from pytest_aoti.checks.random_verdict import RandomCheck, RandomRefusedCheck
from pytest_aoti.checks.signature import SignatureCheck
from pytest_aoti.steps.check import StepsCheck

CHECKS: list[Check] = [
    EagerCheck(),  # "eager": the example in eager PyTorch, before anything is compiled
    RandomRefusedCheck(),  # "exported": a program that draws random numbers fails uncompiled
    SignatureCheck(),  # "engine" from here on
    CrashScreenCheck(),  # before the test process first calls the engine
    RandomCheck(),  # random="shapes": what can be compared; no value check applies to it
    ParityCheck(),
    StepsCheck(),  # the decode loop, whose first step is parity's example
    AliasingCheck(),
]
