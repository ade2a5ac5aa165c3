"""The checks of the ``pytest_aoti_checks`` hook, by origin and in order, checked once."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_aoti.checks.base import PHASES, Check
from pytest_aoti.errors import AotiUsageError

if TYPE_CHECKING:
    from pytest_aoti.hook_order import Answer


@dataclass(frozen=True)
class PluginChecks:
    """The hook's checks: the default plugins' (built in: ``first``, and ``last`` for a
    ``trylast`` one) and, between them, the other plugins' and conftests' (``added``)."""

    first: tuple[Check, ...] = ()
    added: tuple[Check, ...] = ()
    last: tuple[Check, ...] = ()

    def in_order(self) -> tuple[Check, ...]:
        return (*self.first, *self.added, *self.last)


def plugin_checks(answers: Sequence[Answer], core: Sequence[Check] = ()) -> PluginChecks:
    """The checks of ``pytest_aoti_checks``, from its answers in the default plugins' order
    (:func:`~pytest_aoti.hook_order.answers_in_order`): the default plugins' first, a
    ``trylast`` one's last of all, the others' between them in registration (conftest)
    order. A malformed check or a taken name is a usage error."""
    __tracebackhide__ = True
    first = [answer.result for answer in answers if answer.plugin and not answer.trylast]
    last = [answer.result for answer in answers if answer.plugin and answer.trylast]
    others = [answer.result for answer in answers if not answer.plugin]
    taken = {check.name: "a built-in check" for check in core}
    first_checks = _checked(first, taken, "a built-in check")
    last_checks = _checked(last, taken, "a built-in check")
    return PluginChecks(first_checks, _checked(others, taken, "another added check"), last_checks)


def _checked(
    results: Iterable[Sequence[Any] | None], taken: dict[str, str], called: str
) -> tuple[Check, ...]:
    __tracebackhide__ = True
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
            taken[name] = called
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
