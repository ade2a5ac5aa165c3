"""The engine's registered buffers, read back and compared with eager's after every call (a wrong
state shows in an output a call late, or never) from a second instance of the library
(:mod:`pytest_aoti.compiling.engine_state`); unreadable buffers are "not verified", with why."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import torch

from pytest_aoti.compare import compare_leaf
from pytest_aoti.compiling import engine_state
from pytest_aoti.errors import AotiCheckError
from pytest_aoti.findings import FindingKind
from pytest_aoti.tolerance import LeafStats, Tolerance
from pytest_aoti.torch_bugs import BUFFER_STATE_NOT_CARRIED
from pytest_aoti.trees import clone_tree

if TYPE_CHECKING:
    from pytest_aoti.compiling.program import AotiProgram


@dataclass(frozen=True)
class BufferState:
    """How one mutated buffer was checked: the ``buffers`` entries of a JSON check record."""

    name: str
    verified: bool
    calls_compared: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    reason: str | None = None
    """Why it was not verified (``verified`` false)."""

    def to_json(self) -> dict[str, Any]:
        return {
            key: value
            for key, value in asdict(self).items()
            if key != "reason" or value is not None
        }

    def merged(self, other: BufferState) -> BufferState:
        """This buffer over two input sets: verified only where both were."""
        return BufferState(
            self.name,
            self.verified and other.verified,
            self.calls_compared + other.calls_compared,
            max(self.max_abs, other.max_abs),
            max(self.max_rel, other.max_rel),
            self.reason or other.reason,
        )


def merge_states(states: Iterable[BufferState]) -> list[BufferState]:
    """One entry per buffer name, in name order, over every input set."""
    by_name: dict[str, BufferState] = {}
    for state in states:
        known = by_name.get(state.name)
        by_name[state.name] = state if known is None else known.merged(state)
    return [by_name[name] for name in sorted(by_name)]


class BufferReadBack:
    """One input set's read-back engine, its inputs and each buffer's figures."""

    def __init__(
        self,
        program: AotiProgram,
        inputs: tuple[tuple[Any, ...], dict[str, Any]],
        tolerance: Tolerance,
    ) -> None:
        self.names = sorted(program.mutated_buffers)
        self._tolerance = tolerance
        self._accumulates = program.accumulation.buffers
        self._args, self._kwargs = clone_tree(inputs)
        opened = engine_state.open_state_engine(program.package_path, program.device, self.names)
        self._engine = None if isinstance(opened, str) else opened
        self._reason = opened if isinstance(opened, str) else None
        self._stats: dict[str, list[LeafStats]] = {name: [] for name in self.names}

    @property
    def states(self) -> list[BufferState]:
        """What each buffer measured so far."""
        if self._engine is None:
            return [BufferState(name, False, reason=self._reason) for name in self.names]
        return [
            BufferState(
                name,
                True,
                len(leaves),
                max((leaf.max_abs for leaf in leaves), default=0.0),
                max((leaf.max_rel for leaf in leaves), default=0.0),
            )
            for name, leaves in self._stats.items()
        ]

    def after_call(
        self,
        context: str,
        eager_buffers: Mapping[str, Any],
        reference: Callable[[str], Callable[[], Any]] | None = None,
    ) -> list[tuple[str, LeafStats]]:
        """Call the read-back engine and compare its buffers with eager's."""
        __tracebackhide__ = True
        if self._engine is None:
            return []
        try:
            with torch.no_grad():
                self._engine(*self._args, **self._kwargs)
            engine_buffers = self._engine.buffers(self.names)
        except (RuntimeError, TypeError, ValueError) as error:
            # torch-private: a runner that fails where the engine ran is a reason, not a crash
            first = (str(error).splitlines() or [type(error).__name__])[0][:160]
            self._engine = None
            self._reason = f"torch's AOTI runner failed to run the call ({first})"
            return []
        stats = compare_buffers(
            eager_buffers,
            engine_buffers,
            self.names,
            context=context,
            tolerance=self._tolerance,
            reference=reference,
            accumulates=self._accumulates,
        )
        for name, (_, leaf) in zip(self.names, stats, strict=True):
            self._stats[name].append(leaf)
        return stats


def compare_buffers(
    eager_buffers: Mapping[str, Any],
    engine_buffers: Mapping[str, Any],
    names: Iterable[str],
    *,
    context: str,
    tolerance: Tolerance,
    reference: Callable[[str], Callable[[], Any]] | None = None,
    accumulates: Mapping[str, int] | None = None,
) -> list[tuple[str, LeafStats]]:
    """Each of ``names``, eager's buffer against the engine's, under the output rules."""
    __tracebackhide__ = True
    accumulates = accumulates or {}
    stats = []
    for name in names:
        try:
            leaf = compare_leaf(
                eager_buffers[name],
                engine_buffers[name],
                location=f"buffer '{name}'",
                context=context,
                tolerance=tolerance,
                reference=None if reference is None else reference(name),
                accumulates=accumulates.get(name, 0),
            )
        except AotiCheckError as error:
            raise _buffer_error(error, name) from None
        stats.append((context, leaf))
    return stats


def _buffer_error(error: AotiCheckError, name: str) -> AotiCheckError:
    finding = error.finding
    return error.amended(
        replace(
            finding,
            kind=FindingKind.BUFFER,
            details=(*finding.details, _read_back_detail()),
            extra={**finding.extra, "buffers": [name]},
        )
    )


def _read_back_detail() -> str:
    """What a buffer difference means; the known torch bug only on a torch that may have it."""
    detail = "the engine's buffer is read back after each call"
    if BUFFER_STATE_NOT_CARRIED.possible_in():
        detail += f"; a known torch bug on this torch: {BUFFER_STATE_NOT_CARRIED.reason()}"
    return detail
