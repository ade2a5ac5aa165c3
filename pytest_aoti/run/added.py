"""The checks other plugins add through the ``pytest_aoti_checks`` hook, checked once."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pytest_aoti.checks.base import PHASES, Check
from pytest_aoti.errors import AotiUsageError


def added_checks(results: Iterable[Sequence[Any] | None]) -> tuple[Check, ...]:
    """Every check the hook's implementations returned, in their order; a check that is not
    one (no ``name``, a phase that is none of :data:`~pytest_aoti.checks.base.PHASES`, no
    ``applies`` or ``run``) or whose name another check has is a usage error."""
    __tracebackhide__ = True
    from pytest_aoti.run import catalog

    taken = {check.name: "a built-in check" for check in catalog.CHECKS}
    found: list[Check] = []
    for result in results:
        for check in result or ():
            problem = _problem(check)
            if problem:
                raise AotiUsageError(f"pytest_aoti_checks returned {check!r}: {problem}")
            name: str = check.name
            if name in taken:
                raise AotiUsageError(
                    f"pytest_aoti_checks returned a check named {name!r}, the name of "
                    f"{taken[name]}: give it a name of its own"
                )
            taken[name] = "another added check"
            found.append(check)
    return tuple(found)


def _problem(check: Any) -> str:
    name = getattr(check, "name", None)
    if not isinstance(name, str) or not name.isidentifier():
        return "a check needs a name, a word such as 'latency'"
    phase = getattr(check, "phase", None)
    if phase not in PHASES:
        return f"its phase is {phase!r}; a check's phase is one of {', '.join(PHASES)}"
    missing = [
        method for method in ("applies", "run") if not callable(getattr(check, method, None))
    ]
    if missing:
        return f"it has no {' and no '.join(missing)}(plan, context) method"
    return ""
