"""The checks of the ``pytest_aoti_checks`` hook, by origin and in order, checked once."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_aoti.checks.base import PHASES, Check
from pytest_aoti.errors import AotiUsageError


@dataclass(frozen=True)
class PluginChecks:
    """The hook's checks: the default plugins' (built in: ``first``, and ``last`` for a
    ``trylast`` one) and, between them, the other plugins' and conftests' (``added``)."""

    first: tuple[Check, ...] = ()
    added: tuple[Check, ...] = ()
    last: tuple[Check, ...] = ()

    def in_order(self) -> tuple[Check, ...]:
        return (*self.first, *self.added, *self.last)


_DEFAULT: list[Callable[[], PluginChecks]] = []


def set_default(checks: Callable[[], PluginChecks]) -> None:
    """Where a tester made outside a run takes its checks (the package sets it on import)."""
    _DEFAULT[:] = [checks]


def default_plugin_checks() -> PluginChecks:
    """The default plugins' checks, for a tester made outside a run."""
    return _DEFAULT[0]() if _DEFAULT else PluginChecks()


def plugin_checks(
    hook: Any, config: Any, defaults: Collection[str], core: Sequence[Check] = ()
) -> PluginChecks:
    """Each implementation of ``pytest_aoti_checks`` asked once: the default plugins' (named
    in ``defaults``) ranked by that list, a ``trylast`` one's last of all; the others' in
    registration (conftest) order. A malformed check or a taken name is a usage error."""
    __tracebackhide__ = True
    ranks = {name: rank for rank, name in enumerate(defaults)}
    first: dict[int, Any] = {}
    last: dict[int, Any] = {}
    others: list[Any] = []
    for impl in hook.get_hookimpls():  # registration order (conftest order)
        if not (impl.hookwrapper or impl.wrapper):
            result = impl.function(*(config for _ in impl.argnames))
            rank = ranks.get(impl.plugin_name)
            if rank is None:
                others.append(result)
            else:
                (last if impl.trylast else first)[rank] = result
    taken = {check.name: "a built-in check" for check in core}
    first_checks = _checked([first[r] for r in sorted(first)], taken, "a built-in check")
    last_checks = _checked([last[r] for r in sorted(last)], taken, "a built-in check")
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
