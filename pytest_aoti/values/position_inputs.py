"""The inputs a program uses as positions, read from its graph: their values are not drawn.

A one-element input is usually a value (a temperature, a scale, a step count) and is drawn
like any other; where the program uses it as an index into another input, a position
(``index_copy_``, ``narrow``), or reads it as a Python number (``.item()``: a size, a
slice's bound), another value would read out of bounds or change shapes, so it keeps the
example's value. Integer arithmetic on the way (``pos + 1``, a cast, a view) keeps it a
position.
"""

from __future__ import annotations

from typing import Any

from pytest_aoti.api import AotiProgram

INDEX_ARGUMENTS = frozenset({"index", "indices", "start", "offsets", "boundaries"})
"""Schema argument names whose tensor is positions into another tensor."""
SCALAR_READS = frozenset({"_local_scalar_dense", "item"})
"""Ops that read a tensor as a Python number."""
CARRIES_POSITIONS = frozenset(
    {
        "_to_copy",
        "clone",
        "contiguous",
        "alias",
        "detach",
        "lift_fresh_copy",
        "add",
        "sub",
        "rsub",
        "mul",
        "neg",
        "abs",
        "remainder",
        "fmod",
        "floor_divide",
        "div",
        "clamp",
        "clamp_min",
        "clamp_max",
        "where",
    }
)
"""Ops whose integer result is still a position where an input to them is one."""


def position_inputs(exported: Any, names: tuple[str, ...]) -> frozenset[str]:
    """The inputs among ``names`` (user-input placeholder names) that ``exported``'s graph
    uses as positions: an index argument or a number read, directly or through integer
    arithmetic, casts and views."""
    placeholders = {
        node.name: node
        for node in exported.graph.nodes
        if node.op == "placeholder" and node.name in names
    }
    return frozenset(name for name, node in placeholders.items() if _used_as_position(node))


def _used_as_position(start: Any) -> bool:
    seen = {start}
    pending = [start]
    while pending:
        node = pending.pop()
        for user in node.users:
            if user.op != "call_function":
                continue
            target = AotiProgram.NodeTarget(user.target)
            op = target.aten
            if op is None:
                continue
            if op._opname in SCALAR_READS or _in_index_argument(target, user, node):
                return True
            carries = target.is_view or op._opname in CARRIES_POSITIONS
            if carries and _integer(user) and user not in seen:
                seen.add(user)
                pending.append(user)
    return False


def _in_index_argument(target: AotiProgram.NodeTarget, user: Any, node: Any) -> bool:
    """Whether ``user`` passes ``node`` in one of ``target``'s index arguments."""
    for position, argument in enumerate(target.arguments):
        if argument.name not in INDEX_ARGUMENTS:
            continue
        if position < len(user.args):
            value = user.args[position]
        else:
            value = user.kwargs.get(argument.name)
        values = value if isinstance(value, (list, tuple)) else [value]
        if any(item is node for item in values):
            return True
    return False


def _integer(node: Any) -> bool:
    """Whether the node's value is an integer tensor (or unknown: kept a position)."""
    value = node.meta.get("val")
    dtype = getattr(value, "dtype", None)
    return dtype is None or not (dtype.is_floating_point or dtype.is_complex)
