"""Name the first node of a decomposed graph whose value the AOTI engine gets wrong.

Used when the exported and the decomposed programs (plain ATen, run eagerly) match eager
and only the engine differs: the fault is in Inductor's compile. The decomposed graph is
instrumented so that its output also holds every tensor-valued intermediate, exported and
compiled once more, and run side by side with the same instrumented graph run eagerly; the
first intermediate beyond tolerance, in graph order, is the finding.

The extra outputs change what Inductor fuses, so the fault can vanish from the
instrumented engine: then no node is named and the reason says so. Graphs with more
tensor-valued nodes than ``max_outputs`` are narrowed in two rounds (two extra compiles).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch
from torch.fx._pytree import tree_flatten_spec

from pytest_aoti.api import AotiProgram, InputBuilder, Tolerance
from pytest_aoti.triage.instrumented import CompileEngine, InstrumentedRound, failure_line
from pytest_aoti.triage.node_finding import NodeFinding

if TYPE_CHECKING:
    from torch.export import ExportedProgram
    from torch.fx import Node

_NO_DIVERGENCE = (
    "the instrumented program matches eager: the extra outputs changed fusion, so no node "
    "can be named"
)


@dataclass(frozen=True)
class Localization:
    """What :func:`localize` found: a node, or the reason none can be named."""

    node: NodeFinding | None
    reason: str
    """Why no node is named (one line); with a node, an optional note on its precision."""
    compiles: int
    """Extra AOTI compiles it took (0, 1 or 2)."""

    def to_json(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return {
            "node": None if self.node is None else self.node.to_json(),
            "reason": self.reason,
            "compiles": self.compiles,
        }


class _Unsupported(Exception):
    """The graph cannot be instrumented; the message says why, in one line."""


def localize(
    decomposed: ExportedProgram,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    compile_engine: CompileEngine,
    tolerance: Tolerance,
    calls: int = 1,
    max_outputs: int = 512,
) -> Localization:
    """Find the first node of ``decomposed`` whose value the AOTI engine gets wrong.

    ``args``/``kwargs`` are the failing inputs (never modified: each side runs on its own
    clones, reused across calls as a test's calls are). Eager and the engine both run
    ``calls`` calls from the program's exported state; the intermediates of the last call
    are compared in graph order with ``tolerance``. ``compile_engine`` is called once, or
    twice when the graph has more tensor-valued nodes than ``max_outputs``. Never raises
    for torch's failures: those give a Localization without a node whose reason starts
    with ``Type: message``.
    """
    found = _localize(decomposed, args, kwargs, compile_engine, tolerance, calls, max_outputs)
    if found.node is None:
        return found
    outputs = list(decomposed.graph_signature.user_outputs)
    return replace(found, node=replace(found.node, sole_output=outputs == [found.node.name]))


def _localize(
    decomposed: ExportedProgram,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    compile_engine: CompileEngine,
    tolerance: Tolerance,
    calls: int,
    max_outputs: int,
) -> Localization:
    limit = max(1, max_outputs)
    calls = max(1, calls)
    try:
        with AotiProgram.quiet_torch_deprecations():
            flat = _flat_inputs(decomposed, args, kwargs)
            names = _candidate_names(decomposed)
    except _Unsupported as unsupported:
        return Localization(None, str(unsupported), 0)
    except Exception as error:  # torch raises many unrelated types while unlifting
        return Localization(None, failure_line(error, "preparing the graph"), 0)
    if not names:
        return Localization(None, "the graph has no tensor-valued node to compare", 0)

    first = _choose(range(len(names)), limit)
    outcome = InstrumentedRound.run(
        decomposed, flat, [names[i] for i in first], compile_engine, calls
    )
    if outcome.failure is not None:
        return Localization(None, outcome.failure, 1)
    hit = outcome.first_mismatch(tolerance)
    if hit is None:
        written = outcome.written_difference(tolerance)
        if written is not None:
            reason = (
                f"every intermediate of the instrumented engine matches eager, but input "
                f"'{written}' is left holding another value: the fault is in how the engine "
                "writes mutated inputs back, not in a node"
            )
            return Localization(None, reason, 1)
        return Localization(None, _NO_DIVERGENCE, 1)
    if len(first) == len(names):
        return Localization(outcome.finding(hit, tolerance), "", 1)

    return _narrowed(
        decomposed, flat, names, first, hit, outcome, compile_engine, calls, tolerance, limit
    )


def _narrowed(
    decomposed: ExportedProgram,
    flat: Any,
    names: list[str],
    first: list[int],
    hit: int,
    outcome: InstrumentedRound,
    compile_engine: CompileEngine,
    calls: int,
    tolerance: Tolerance,
    limit: int,
) -> Localization:
    """Round 1 saw only a sample of the nodes: look again at the unseen nodes the failing one
    depends on that no matching sampled node depends on, the only ones where it can have
    started (a second instrumented compile)."""
    failing = first[hit]
    matched = [names[i] for i in first[:hit]]
    try:
        with AotiProgram.quiet_torch_deprecations():
            suspects = _suspects(decomposed, names, failing, set(first), matched)
    except Exception as error:  # the sample's finding stands on its own
        note = f"named from a sample of {len(first)} of {len(names)} nodes; narrowing failed: "
        return Localization(
            outcome.finding(hit, tolerance), note + failure_line(error, "narrowing"), 1
        )
    if not suspects:
        return Localization(outcome.finding(hit, tolerance), "", 1)
    # the failing node goes along (where there is room) to tell "the suspects match" from
    # "the fault vanished from this compile"
    sampled = _choose(suspects, max(1, limit - 1))
    second = sampled + [failing] if limit > 1 else sampled
    retry = InstrumentedRound.run(
        decomposed, flat, [names[i] for i in second], compile_engine, calls
    )
    narrowed = retry.first_mismatch(tolerance) if retry.failure is None else None
    if narrowed is None:
        why = retry.failure or "nothing diverged there"
        note = (
            f"named from a sample of {len(first)} of {len(names)} nodes; the narrowing "
            f"compile named no earlier node ({why}), so the first diverging node may be earlier"
        )
        return Localization(outcome.finding(hit, tolerance), note, 2)
    note = ""
    if len(sampled) < len(suspects):
        note = f"narrowed from a sample of {len(sampled)} of {len(suspects)} suspect nodes"
    return Localization(retry.finding(narrowed, tolerance), note, 2)


# --- the graph ----------------------------------------------------------------------


def _flat_inputs(
    decomposed: ExportedProgram, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> list[Any]:
    """The user inputs in the unlifted module's placeholder order, cloned."""
    flat = tree_flatten_spec((tuple(args), dict(kwargs)), decomposed.call_spec.in_spec)
    return list(InputBuilder.clone_tree(list(flat)))


def _candidate_names(decomposed: ExportedProgram) -> list[str]:
    """Names of the tensor-valued call_function nodes, in graph order."""
    names = []
    for node in decomposed.module().graph.nodes:
        if node.op != "call_function":
            continue
        name = AotiProgram.NodeTarget(node.target).control_flow
        if name is not None:
            raise _Unsupported(
                f"the graph has control flow (torch.{name}) and cannot be instrumented"
            )
        if isinstance(node.meta.get("val"), torch.Tensor):
            names.append(node.name)
    return names


def _suspects(
    decomposed: ExportedProgram,
    names: Sequence[str],
    failing: int,
    seen: set[int],
    matched: Sequence[str],
) -> list[int]:
    """Indices of unseen candidates feeding ``names[failing]`` but no matched node."""
    nodes = {node.name: node for node in decomposed.module().graph.nodes}
    cleared: set[str] = set()
    for name in matched:
        cleared |= _ancestors(nodes[name])
    feeding = _ancestors(nodes[names[failing]])
    return [
        index
        for index, name in enumerate(names[:failing])
        if index not in seen and name in feeding and name not in cleared
    ]


def _ancestors(node: Node) -> set[str]:
    found: set[str] = set()
    stack = list(node.all_input_nodes)
    while stack:
        current = stack.pop()
        if current.name not in found:
            found.add(current.name)
            stack.extend(current.all_input_nodes)
    return found


def _choose(indices: Sequence[int], limit: int) -> list[int]:
    """At most ``limit`` of ``indices``, evenly spaced, always with the last one."""
    if len(indices) <= limit:
        return list(indices)
    if limit == 1:
        return [indices[-1]]
    step = (len(indices) - 1) / (limit - 1)
    return sorted({indices[round(k * step)] for k in range(limit)})
