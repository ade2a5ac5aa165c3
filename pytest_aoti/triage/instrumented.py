"""One instrumented compile: the decomposed graph made to return some of its intermediates,
exported and AOT-compiled once more, and run beside the same graph run eagerly (with a
float64 reference on demand), so that :mod:`.localize` can compare node by node."""

from __future__ import annotations

import copy
import math
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch.fx import GraphModule
from torch.fx.graph import CodeGen

from pytest_aoti.api import AotiCheckError, AotiProgram, Comparison, InputBuilder, Tolerance
from pytest_aoti.triage.node_finding import NodeFinding, source_line

if TYPE_CHECKING:
    from torch.export import ExportedProgram
    from torch.fx import Node

CompileEngine = Callable[["ExportedProgram"], Callable[..., Any]]
"""AOT-compiles an exported program and returns the loaded engine."""

_REASON_LIMIT = 300


@dataclass
class InstrumentedRound:
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
    ) -> InstrumentedRound:
        """Instrument, export, compile, and run both sides; ``failure`` says what broke."""
        step = "instrumenting the graph"
        try:
            with AotiProgram.quiet_torch_deprecations():
                instrumented, nodes = _instrument(decomposed, names)
                # eager runs a copy: `instrumented` shares its tensors with `decomposed`,
                # whose state must stay the exported one (export itself leaves it alone)
                eager_module = copy.deepcopy(instrumented)
                step = "exporting the instrumented graph"
                exported = torch.export.export(
                    instrumented, tuple(InputBuilder.clone_tree(list(flat))), strict=False
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
            return cls([], [], [], _unavailable, {}, failure=failure_line(error, step))
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
            mismatched, max_abs, max_rel = Comparison(tolerance).mismatches(want, got, location)
        else:  # nothing to compare element by element
            mismatched, max_abs, max_rel = want.numel(), math.inf, math.inf
        return NodeFinding(
            name=node.name,
            op=AotiProgram.NodeTarget(node.target).name,
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
                with AotiProgram.quiet_torch_deprecations():
                    Comparison(tolerance).leaf(want, got, location=f"input '{name}'")
            except AotiCheckError:
                return name
        return None

    def _detail(self, position: int, tolerance: Tolerance) -> str | None:
        """The comparison's first line if the node differs, else None."""
        try:
            with AotiProgram.quiet_torch_deprecations():
                Comparison(tolerance).leaf(
                    self.eager[position],
                    self.engine[position],
                    location=f"node {self.nodes[position].name}",
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
    inputs: list[Any] = InputBuilder.clone_tree(list(flat))
    values: list[Any] = []
    for _ in range(calls):
        with torch.no_grad():
            values = InputBuilder.clone_tree(list(function(*inputs)))
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
                with AotiProgram.quiet_torch_deprecations():
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


def _instrument(
    decomposed: ExportedProgram, names: Sequence[str]
) -> tuple[GraphModule, list[Node]]:
    """The unlifted graph returning the named nodes' values (flat inputs, flat output).

    Also returns the named nodes, whose metadata (stack trace, argument shapes) the
    finding reports.
    """
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
        if AotiProgram.NodeTarget(target).is_view:
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


def _concrete(size: Any) -> int:
    if isinstance(size, int):
        return size
    hint = getattr(getattr(size, "node", None), "hint", None)
    return hint if isinstance(hint, int) else -1


def _same_layout(want: torch.Tensor, got: Any) -> bool:
    return (
        isinstance(got, torch.Tensor)
        and want.shape == got.shape
        and want.dtype == got.dtype
        and want.device == got.device
    )


def failure_line(error: BaseException, step: str) -> str:
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
