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

import copy
import linecache
import math
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from pytest_aoti.compare import compare_leaf
from pytest_aoti.compiling.explain import quoted_frames
from pytest_aoti.compiling.pipeline import quiet_torch_deprecations
from pytest_aoti.errors import AotiCheckError
from pytest_aoti.tolerance import Tolerance, mismatch_counts
from pytest_aoti.trees import clone_tree

if TYPE_CHECKING:
    from torch.export import ExportedProgram
    from torch.fx import GraphModule, Node

CompileEngine = Callable[["ExportedProgram"], Callable[..., Any]]
"""AOT-compiles an exported program and returns the loaded engine."""

_NO_DIVERGENCE = (
    "the instrumented program matches eager: the extra outputs changed fusion, so no node "
    "can be named"
)
_REASON_LIMIT = 300


@dataclass(frozen=True)
class SourceLine:
    """A line of the user's code: where a graph node came from."""

    file: str
    line: int
    text: str
    """The source line's text, stripped."""
    function: str = ""

    def describe(self) -> str:
        """``/path/model.py:12 in forward: y = x * 3``."""
        where = f"{self.file}:{self.line}"
        if self.function:
            where += f" in {self.function}"
        return f"{where}: {self.text}" if self.text else where

    def to_json(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return {"file": self.file, "line": self.line, "text": self.text, "function": self.function}


@dataclass(frozen=True)
class NodeFinding:
    """The first node of the decomposed graph whose value the engine gets wrong."""

    name: str
    """The fx node name, e.g. ``mul_1``."""
    op: str
    """The op the node calls, e.g. ``aten.mul.Tensor``."""
    shape: tuple[int, ...]
    """The node's output shape (eager's)."""
    dtype: str
    input_shapes: tuple[tuple[int, ...], ...]
    """Shapes of the node's tensor arguments, in argument order."""
    mismatched: int
    """Elements beyond tolerance (or unequal, for exact dtypes)."""
    numel: int
    max_abs: float
    max_rel: float
    source: SourceLine | None
    """The innermost frame of the user's code in the node's stack trace."""
    detail: str = ""
    """The comparison's own first line, e.g. when the shapes differ."""

    def describe(self) -> list[str]:
        """A few human-readable lines: the node, its source line, the figures."""
        inputs = ", ".join(_shape_text(shape) for shape in self.input_shapes)
        lines = [
            f"first diverging node: {self.name} = {self.op}({inputs}) -> "
            f"{_shape_text(self.shape)} {self.dtype}"
        ]
        if self.source is not None:
            lines.append(f"at {self.source.describe()}")
        else:
            lines.append("source line unknown: the node carries no stack trace of user code")
        share = 100.0 * self.mismatched / self.numel if self.numel else 0.0
        lines.append(
            f"mismatched {self.mismatched} of {self.numel} elements ({share:.3g}%), "
            f"max abs error {self.max_abs:.3g}, max rel error {self.max_rel:.3g}"
        )
        if self.detail:
            lines.append(self.detail)
        return lines

    def to_json(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (shapes as lists)."""
        return {
            "name": self.name,
            "op": self.op,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "input_shapes": [list(shape) for shape in self.input_shapes],
            "mismatched": self.mismatched,
            "numel": self.numel,
            "max_abs": _json_float(self.max_abs),
            "max_rel": _json_float(self.max_rel),
            "source": None if self.source is None else self.source.to_json(),
            "detail": self.detail,
        }


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
    limit = max(1, max_outputs)
    calls = max(1, calls)
    try:
        with quiet_torch_deprecations():
            flat = _flat_inputs(decomposed, args, kwargs)
            names = _candidate_names(decomposed)
    except _Unsupported as unsupported:
        return Localization(None, str(unsupported), 0)
    except Exception as error:  # torch raises many unrelated types while unlifting
        return Localization(None, _failure(error, "preparing the graph"), 0)
    if not names:
        return Localization(None, "the graph has no tensor-valued node to compare", 0)

    first = _choose(range(len(names)), limit)
    outcome = _Round.run(decomposed, flat, [names[i] for i in first], compile_engine, calls)
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

    # Round 1 saw only a sample: look again at the unseen nodes the failing one depends on
    # that no matching sampled node depends on, the only ones where it can have started.
    failing = first[hit]
    matched = [names[i] for i in first[:hit]]
    try:
        with quiet_torch_deprecations():
            suspects = _suspects(decomposed, names, failing, set(first), matched)
    except Exception as error:  # the sample's finding stands on its own
        note = f"named from a sample of {len(first)} of {len(names)} nodes; narrowing failed: "
        return Localization(outcome.finding(hit, tolerance), note + _failure(error, "narrowing"), 1)
    if not suspects:
        return Localization(outcome.finding(hit, tolerance), "", 1)
    # the failing node goes along (where there is room) to tell "the suspects match" from
    # "the fault vanished from this compile"
    sampled = _choose(suspects, max(1, limit - 1))
    second = sampled + [failing] if limit > 1 else sampled
    retry = _Round.run(decomposed, flat, [names[i] for i in second], compile_engine, calls)
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
    from torch.fx._pytree import tree_flatten_spec

    flat = tree_flatten_spec((tuple(args), dict(kwargs)), decomposed.call_spec.in_spec)
    return list(clone_tree(list(flat)))


def _candidate_names(decomposed: ExportedProgram) -> list[str]:
    """Names of the tensor-valued call_function nodes, in graph order."""
    names = []
    for node in decomposed.module().graph.nodes:
        if node.op != "call_function":
            continue
        if isinstance(node.target, torch._ops.HigherOrderOperator):
            name = getattr(node.target, "__name__", str(node.target))
            raise _Unsupported(
                f"the graph has control flow (torch.{name}) and cannot be instrumented"
            )
        if isinstance(node.meta.get("val"), torch.Tensor):
            names.append(node.name)
    return names


def _instrument(
    decomposed: ExportedProgram, names: Sequence[str]
) -> tuple[GraphModule, list[Node]]:
    """The unlifted graph returning the named nodes' values (flat inputs, flat output).

    Also returns the named nodes, whose metadata (stack trace, argument shapes) the
    finding reports.
    """
    from torch.fx import GraphModule
    from torch.fx.graph import CodeGen

    unlifted = decomposed.module()
    graph = unlifted.graph
    for node in list(graph.nodes):
        # input checks of the unlifted module; they would be traced into the new export
        if node.op == "call_module" and str(node.target).startswith("_guards"):
            graph.erase_node(node)
    by_name = {node.name: node for node in graph.nodes}
    originals = [by_name[name] for name in names]
    values = []
    for node in originals:
        target = node.target
        if isinstance(target, torch._ops.OpOverload) and target.is_view:
            # a view returned as output could alias an input that the graph's trailing
            # copy_ overwrites; a copy taken right away holds the node's own value
            with graph.inserting_after(node):
                values.append(graph.call_function(torch.ops.aten.clone.default, (node,)))
        else:
            values.append(node)
    graph.output_node().args = (tuple(values),)
    # the pytree codegen would check the output against the original output spec
    graph.set_codegen(CodeGen())
    graph.lint()
    # a fresh GraphModule drops the unlifted module's input-spec hook and guard submodule
    return GraphModule(unlifted, graph), originals


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


# --- one instrumented compile -------------------------------------------------------


@dataclass
class _Round:
    """Eager's and the engine's values of some nodes at the last call."""

    nodes: list[Node]
    eager: list[torch.Tensor]
    engine: list[Any]
    reference: Callable[[], list[Any]]
    """float64 values of the nodes, computed eagerly; raises if unavailable."""
    shapes: dict[str, tuple[int, ...]]
    """Concrete shapes of the graph's tensors at hand, by node name."""
    written: list[tuple[str, Any, Any]] = field(default_factory=list)
    """(input name, eager's, engine's) for each tensor input after the last call."""
    failure: str | None = None

    @classmethod
    def run(
        cls,
        decomposed: ExportedProgram,
        flat: list[Any],
        names: Sequence[str],
        compile_engine: CompileEngine,
        calls: int,
    ) -> _Round:
        """Instrument, export, compile, and run both sides; ``failure`` says what broke."""
        step = "instrumenting the graph"
        try:
            with quiet_torch_deprecations():
                instrumented, nodes = _instrument(decomposed, names)
                # eager runs a copy: `instrumented` shares its tensors with `decomposed`,
                # whose state must stay the exported one (export itself leaves it alone)
                eager_module = copy.deepcopy(instrumented)
                step = "exporting the instrumented graph"
                exported = torch.export.export(
                    instrumented, tuple(clone_tree(list(flat))), strict=False
                ).run_decompositions()
                step = "compiling the instrumented program"
                engine = compile_engine(exported)
                del exported
                shapes = _known_shapes(instrumented, flat)
                inputs = [n.name for n in instrumented.graph.nodes if n.op == "placeholder"]
                step = "running the instrumented graph eagerly"
                eager, eager_inputs = _run(eager_module, flat, calls)
                step = "running the instrumented engine"
                engine_values, engine_inputs = _run(engine, flat, calls)
        except Exception as error:  # any torch failure ends the localization, not the test
            return cls([], [], [], _unavailable, {}, failure=_failure(error, step))
        if len(engine_values) != len(eager):
            failure = (
                f"the instrumented engine returned {len(engine_values)} values, eager {len(eager)}"
            )
            return cls([], [], [], _unavailable, {}, failure=failure)
        for node, value in zip(nodes, eager):
            shapes[node.name] = tuple(value.shape)
        reference = _Float64(instrumented, flat, calls).values
        written = [
            (name, want, got)
            for name, want, got in zip(inputs, eager_inputs, engine_inputs)
            if isinstance(want, torch.Tensor)
        ]
        return cls(nodes, eager, engine_values, reference, shapes, written)

    def first_mismatch(self, tolerance: Tolerance) -> int | None:
        """Position of the first node beyond tolerance, in graph order."""
        for position in range(len(self.nodes)):
            if self._detail(position, tolerance) is not None:
                return position
        return None

    def finding(self, position: int, tolerance: Tolerance) -> NodeFinding:
        """The NodeFinding for the node at ``position``."""
        node = self.nodes[position]
        want, got = self.eager[position], self.engine[position]
        detail = self._detail(position, tolerance) or ""
        if _same_layout(want, got):
            location = f"node {node.name}"
            mismatched, max_abs, max_rel = mismatch_counts(want, got, tolerance, location)
        else:  # nothing to compare element by element
            mismatched, max_abs, max_rel = want.numel(), math.inf, math.inf
        return NodeFinding(
            name=node.name,
            op=_op_name(node.target),
            shape=tuple(want.shape),
            dtype=str(want.dtype).removeprefix("torch."),
            input_shapes=tuple(self._input_shapes(node)),
            mismatched=mismatched,
            numel=want.numel(),
            max_abs=max_abs,
            max_rel=max_rel,
            source=source_line(node),
            detail="" if _same_layout(want, got) else detail,
        )

    def written_difference(self, tolerance: Tolerance) -> str | None:
        """The first input the engine left holding another value than eager did."""
        for name, want, got in self.written:
            try:
                with quiet_torch_deprecations():
                    compare_leaf(want, got, location=f"input '{name}'", tolerance=tolerance)
            except AotiCheckError:
                return name
        return None

    def _detail(self, position: int, tolerance: Tolerance) -> str | None:
        """compare_leaf's first line if the node differs, else None."""
        try:
            with quiet_torch_deprecations():
                compare_leaf(
                    self.eager[position],
                    self.engine[position],
                    location=f"node {self.nodes[position].name}",
                    tolerance=tolerance,
                    reference=lambda: self.reference()[position],
                )
        except AotiCheckError as error:
            return str(error).splitlines()[0]
        return None

    def _input_shapes(self, node: Node) -> Iterator[tuple[int, ...]]:
        for arg in node.all_input_nodes:
            if arg.name in self.shapes:
                yield self.shapes[arg.name]
                continue
            # a node left out of a sampled round: its traced shape, symbols as their hints
            value = arg.meta.get("val")
            if isinstance(value, torch.Tensor):
                yield tuple(_concrete(size) for size in value.shape)


def _known_shapes(module: GraphModule, flat: list[Any]) -> dict[str, tuple[int, ...]]:
    """Shapes of the placeholders (the failing inputs) and of the module's tensors."""
    shapes = {}
    placeholders = [node for node in module.graph.nodes if node.op == "placeholder"]
    for node, leaf in zip(placeholders, flat):
        if isinstance(leaf, torch.Tensor):
            shapes[node.name] = tuple(leaf.shape)
    for node in module.graph.nodes:
        if node.op == "get_attr":
            value = operator.attrgetter(str(node.target))(module)
            if isinstance(value, torch.Tensor):
                shapes[node.name] = tuple(value.shape)
    return shapes


def _run(function: Callable[..., Any], flat: list[Any], calls: int) -> tuple[list[Any], list[Any]]:
    """Values of the last of ``calls`` calls on one set of clones, and those clones.

    The same clones serve every call, as in a test's calls: mutations carry over.
    """
    inputs: list[Any] = clone_tree(list(flat))
    values: list[Any] = []
    for _ in range(calls):
        with torch.no_grad():
            values = clone_tree(list(function(*inputs)))
    return values, inputs


class _Float64:
    """The instrumented graph run eagerly in float64: the reference for the fp64 check.

    ``module`` must hold the exported state; it is copied, not run, and only on demand.
    """

    def __init__(self, module: GraphModule, flat: list[Any], calls: int) -> None:
        self._module: GraphModule | None = module
        self._flat = flat
        self._calls = calls
        self._values: list[Any] | None = None
        self._problem: Exception | None = None

    def values(self) -> list[Any]:
        """Computed on first demand, once; raises what computing them raised."""
        if self._values is None and self._problem is None:
            try:
                with quiet_torch_deprecations():
                    self._values = self._compute()
            except Exception as error:  # the reference is a bonus; it may not exist
                self._problem = error
            self._module = None
        if self._problem is not None:
            raise self._problem
        assert self._values is not None
        return self._values

    def _compute(self) -> list[Any]:
        assert self._module is not None
        module = copy.deepcopy(self._module).to(torch.float64)
        # the graph spells out every dtype (torch.ones(3) is full(..., dtype=float32))
        for node in module.graph.nodes:
            node.args = _wide_dtypes(node.args)
            node.kwargs = _wide_dtypes(node.kwargs)
        module.recompile()
        flat = [_to_float64(leaf) for leaf in self._flat]
        return _run(module, flat, self._calls)[0]


def _unavailable() -> list[Any]:
    raise RuntimeError("no float64 reference")


# --- helpers ------------------------------------------------------------------------


def source_line(node: Node) -> SourceLine | None:
    """The innermost frame of user code in ``node.meta["stack_trace"]``, or None."""
    trace = node.meta.get("stack_trace")
    if not isinstance(trace, str):
        return None
    frames = quoted_frames(trace)
    if not frames:
        return None
    file, number, function = frames[-1]
    return SourceLine(file, number, linecache.getline(file, number).strip(), function)


def _op_name(target: Any) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return str(getattr(target, "__name__", target))


def _concrete(size: Any) -> int:
    if isinstance(size, int):
        return size
    hint = getattr(getattr(size, "node", None), "hint", None)
    return hint if isinstance(hint, int) else -1


def _shape_text(shape: tuple[int, ...]) -> str:
    return f"({shape[0]},)" if len(shape) == 1 else f"({', '.join(map(str, shape))})"


def _same_layout(want: torch.Tensor, got: Any) -> bool:
    return (
        isinstance(got, torch.Tensor)
        and want.shape == got.shape
        and want.dtype == got.dtype
        and want.device == got.device
    )


def _failure(error: BaseException, step: str) -> str:
    """``Type: first line of the message (while <step>)``, one line."""
    lines = str(error).strip().splitlines()
    message = lines[0].strip() if lines else ""
    if len(message) > _REASON_LIMIT:
        message = message[: _REASON_LIMIT - 3] + "..."
    head = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return f"{head} (while {step})"


def _to_float64(leaf: Any) -> Any:
    if isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
        return leaf.to(torch.float64)
    return leaf


def _wide_dtypes(value: Any) -> Any:
    if isinstance(value, torch.dtype):
        return torch.float64 if value.is_floating_point else value
    if isinstance(value, tuple):
        return tuple(_wide_dtypes(item) for item in value)
    if isinstance(value, list):
        return [_wide_dtypes(item) for item in value]
    if isinstance(value, dict):
        return {key: _wide_dtypes(item) for key, item in value.items()}
    return value


def _json_float(value: float) -> float | str:
    # JSON has no infinity; a shape or dtype mismatch has no finite error
    return value if math.isfinite(value) else str(value)
