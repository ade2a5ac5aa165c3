"""Where a shape guard came from: the source line that made torch narrow a dynamic dim. torch logs
every guard on its ``symbolic_shapes`` logger while the model's frames are on the stack;
:func:`record_guards` listens during a repeated failed export (a stack walk per guard is too
costly for every export) and keeps each guard's innermost frame outside torch."""

from __future__ import annotations

import contextlib
import linecache
import logging
import re
import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_aoti.compiling.explain import SourceFrame
from pytest_aoti.frames import is_library_file

if TYPE_CHECKING:
    import torch

_LOGGER = "torch.fx.experimental.symbolic_shapes"
_GUARD_FORMAT = "%s %s [guard added] %s%s%s"
_RANGE = re.compile(r"\[(-?\w+), (-?\w+)\]")
_VIOLATED = re.compile(r"Not all values of (?P<dim>\w+) = (?P<source>\S+) in the specified range")
_SPECIALIZED = re.compile(
    r"You marked (?P<dim>\w+) as dynamic but your code specialized it to be a constant "
    r"\((?P<value>-?\d+)\)"
)
_MAX_GUARDS = 3


@dataclass(frozen=True)
class Guard:
    """One guard torch added, with the source line outside torch that made it."""

    expr: str
    """sympy text in torch's symbols, e.g. ``s70 - 1 >= 2``."""
    frame: SourceFrame | None


@dataclass
class GuardLog:
    """Guards and symbols torch's shape environment recorded during one export."""

    guards: list[Guard] = field(default_factory=list)
    symbols: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    """Symbol → (source, lowest, highest) as torch created it, e.g.
    ``s70 → ("L['input_ids'].size()[1]", "2", "64")``."""

    def explain(self, error: BaseException) -> list[str]:
        """Per dim of a constraint violation in ``error`` (else nothing): the guards that narrow
        its declared range and where they were added ("source unavailable" without a frame)."""
        lines: list[str] = []
        for match in _SPECIALIZED.finditer(str(error)):
            dim, value = match["dim"], match["value"]
            pinned = re.compile(rf"Eq\((?:s\d+, {value}|{value}, s\d+)\)")
            found = _unique(g for g in self.guards if pinned.fullmatch(g.expr))
            lines += _describe(found, dim, dim, symbol=None)
        for match in _VIOLATED.finditer(str(error)):
            dim, source = match["dim"], match["source"]
            symbol = next((s for s, (src, _, _) in self.symbols.items() if src == source), None)
            if symbol is None:
                lines.append(f"  guard on {dim} ({source}): source unavailable")
                continue
            _, low, high = self.symbols[symbol]
            narrowing = _unique(g for g in self.guards if _narrows(g.expr, symbol, low, high))
            lines += _describe(narrowing, dim, f"{dim} ({source})", symbol)
        return lines


def _describe(guards: list[Guard], dim: str, subject: str, symbol: str | None) -> list[str]:
    """Lines naming each guard and where torch was when it added it."""
    if not guards:
        return [f"  guard on {subject}: source unavailable"]
    lines = []
    for guard in guards[:_MAX_GUARDS]:
        pattern = rf"\b{symbol}\b" if symbol else r"\bs\d+\b"
        shown = re.sub(pattern, dim, guard.expr)
        if guard.frame is None:
            lines.append(f"  guard {shown} on {subject}: source unavailable")
            continue
        lines.append(f"  guard {shown} on {subject} was added")
        lines += guard.frame.describe(indent="    ")
    return lines


def guard_sources(
    error: BaseException,
    module: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    options: Mapping[str, Any],
) -> list[str]:
    """For a constraint violation, :meth:`GuardLog.explain`'s lines from exporting once more
    while recording guards; else none. The caller hides torch's deprecation warnings."""
    import torch

    text = str(error)
    if not (_VIOLATED.search(text) or _SPECIALIZED.search(text)):
        return []
    with contextlib.suppress(Exception), record_guards() as log:
        torch.export.export(module, tuple(args), dict(kwargs), **options)
    return log.explain(error)


@contextlib.contextmanager
def record_guards() -> Iterator[GuardLog]:
    """Record the guards torch adds inside the block; what torch logs is unchanged."""
    log = GuardLog()
    logger = logging.getLogger(_LOGGER)
    shown_before = logger.isEnabledFor(logging.INFO)
    level = logger.level

    def capture(record: logging.LogRecord) -> bool:
        """Read each record; let it through only if it was shown anyway."""
        args = record.args if isinstance(record.args, tuple) else ()
        if record.msg == _GUARD_FORMAT and len(args) > 1:
            log.guards.append(Guard(str(args[1]), _user_frame()))
        elif (
            isinstance(record.msg, str) and record.msg.startswith("create_symbol") and len(args) > 3
        ):
            bounds = _RANGE.search(str(args[3]))
            low, high = bounds.groups() if bounds else ("-oo", "oo")
            log.symbols[str(args[0])] = (str(args[2]), low, high)
        return shown_before or record.levelno >= logging.WARNING

    logger.addFilter(capture)
    if not shown_before:
        logger.setLevel(logging.INFO)
    try:
        yield log
    finally:
        logger.removeFilter(capture)
        if not shown_before:
            logger.setLevel(level)


def _user_frame() -> SourceFrame | None:
    """The innermost frame on the stack outside torch, pytest-aoti and Python itself."""
    frames = [f for f in traceback.extract_stack() if not is_library_file(f.filename)]
    frames = [f for f in frames if "/_pytest/" not in f.filename and "/pluggy/" not in f.filename]
    if not frames:
        return None
    *outer, inner = frames
    callers = tuple(
        f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} in {f.name}" for f in reversed(outer)
    )
    line = inner.lineno or 0
    text = linecache.getline(inner.filename, line).strip()
    return SourceFrame(inner.filename, line, inner.name, text, callers[:3])


def _narrows(expr: str, symbol: str, low: str, high: str) -> bool:
    """Whether guard ``expr`` on ``symbol`` alone fails at an end of ``[low, high]``."""
    if not re.search(rf"\b{symbol}\b", expr) or set(re.findall(r"\b[su]\d+\b", expr)) != {symbol}:
        return False
    import sympy

    try:
        guard = sympy.sympify(expr)
        for end in (low, high):
            if not end.lstrip("-").isdigit():
                continue
            value = guard.subs(sympy.Symbol(symbol), int(end))
            if value in (sympy.false, False):
                return True
    except (sympy.SympifyError, TypeError, ValueError, AttributeError):
        return False
    return False


def _unique(guards: Iterator[Guard]) -> list[Guard]:
    seen: set[tuple[str, str, int]] = set()
    kept = []
    for guard in guards:
        where = (
            (guard.expr, guard.frame.file, guard.frame.line) if guard.frame else (guard.expr, "", 0)
        )
        if where not in seen:
            seen.add(where)
            kept.append(guard)
    return kept
