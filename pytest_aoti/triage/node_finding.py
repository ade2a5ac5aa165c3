"""What localization names: the first diverging node of a graph and the user's line it came
from, as data with its lines and JSON."""

from __future__ import annotations

import linecache
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pytest_aoti.api import Finding

if TYPE_CHECKING:
    from torch.fx import Node

    from pytest_aoti.api import Figures


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
    sole_output: bool = False
    """Its value is the program's one output: the tensor the failure's headline measured
    (in the engine under test; its figures are the headline's, see :meth:`as_measured`)."""

    def as_measured(self, figures: Figures | None) -> NodeFinding:
        """The node with the headline's ``figures`` where its value is the program's one
        output of the same shape: the instrumented engine, compiled with more outputs, can
        be wrong by another amount, and one tensor gets one set of figures."""
        if not self.sole_output or figures is None or tuple(figures.shape) != self.shape:
            return self
        return replace(
            self,
            mismatched=figures.mismatched,
            numel=figures.numel,
            max_abs=figures.max_abs,
            max_rel=figures.max_rel,
        )

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


def source_line(node: Node) -> SourceLine | None:
    """The innermost frame of user code in ``node.meta["stack_trace"]``, or None."""
    trace = node.meta.get("stack_trace")
    if not isinstance(trace, str):
        return None
    frames = Finding.quoted_frames(trace)
    if not frames:
        return None
    file, number, function = frames[-1]
    return SourceLine(file, number, linecache.getline(file, number).strip(), function)


def _shape_text(shape: tuple[int, ...]) -> str:
    return f"({shape[0]},)" if len(shape) == 1 else f"({', '.join(map(str, shape))})"


def _json_float(value: float) -> float | str:
    # JSON has no infinity; a shape or dtype mismatch has no finite error
    return value if math.isfinite(value) else str(value)
