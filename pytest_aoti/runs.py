"""One input set run through eager PyTorch and a fresh AOTI engine, compared call by call."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pytest_aoti.compare import (
    LeafStats,
    Tolerance,
    assert_unchanged,
    assert_values,
    compare_leaf,
    compare_trees,
)
from pytest_aoti.errors import AotiCheckError
from pytest_aoti.signature import named_user_inputs

if TYPE_CHECKING:
    import torch

    from pytest_aoti.program import AotiProgram


class InputRun:
    """Eager and engine side by side on their own clones of one input set.

    Eager runs a deep copy of the module, the engine is freshly loaded from the package:
    both start from the module's own state, and they never share a tensor.
    """

    def __init__(
        self,
        program: AotiProgram,
        module: torch.nn.Module,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        *,
        tolerance: Tolerance,
        label: str = "",
    ) -> None:
        self.program = program
        self.tolerance = tolerance
        self.label = label
        self._module = module
        self._originals = clone_tree((tuple(args), dict(kwargs)))
        self._reference = Float64Reference(program, module, *self._originals)

    def check(
        self, calls: int, mutates: Mapping[str, Any] | None, *, values_too: bool
    ) -> list[tuple[str, LeafStats]]:
        """Run ``calls`` calls on both sides, comparing after each; then the expected values.

        ``values_too``: check plain (non-callable) ``mutates`` values, which describe the
        first input set only; callables are evaluated on every input set.
        """
        __tracebackhide__ = True
        import torch

        exported = self.program.exported
        self.program.validate(*self._originals[0], **self._originals[1])
        eager_module = copy.deepcopy(self._module)
        eager_args, eager_kwargs = clone_tree(self._originals)
        engine_args, engine_kwargs = clone_tree(self._originals)
        eager_inputs = named_user_inputs(exported, eager_args, eager_kwargs)
        engine_inputs = named_user_inputs(exported, engine_args, engine_kwargs)
        original_inputs = named_user_inputs(exported, *self._originals)
        addresses = {
            name: leaf.data_ptr()
            for name, leaf in engine_inputs.items()
            if isinstance(leaf, torch.Tensor)
        }
        engine = self.program.engine_in_exported_state()
        mutated = self.program.mutated_inputs
        stats: list[tuple[str, LeafStats]] = []
        for call in range(1, calls + 1):
            context = self._context(call, calls)
            with torch.no_grad():
                eager_out = clone_tree(eager_module(*eager_args, **eager_kwargs))
            engine_out = clone_tree(engine(*engine_args, **engine_kwargs))
            output_reference = self._reference.outputs_after(call)
            for leaf in compare_trees(
                eager_out,
                engine_out,
                what="output",
                context=context,
                tolerance=self.tolerance,
                reference=output_reference,
            ):
                stats.append((context, leaf))
            for name, engine_leaf in engine_inputs.items():
                if not isinstance(engine_leaf, torch.Tensor):
                    continue
                location = f"input '{name}'"
                if name not in mutated:
                    assert_unchanged(
                        original_inputs[name], engine_leaf, location=location, context=context
                    )
                    # eager writing to an input the program does not mutate means export
                    # lost that write: the comparison below reports it as a difference
                else:
                    _assert_in_place(engine_leaf, addresses[name], location, context)
                leaf = compare_leaf(
                    eager_inputs[name],
                    engine_leaf,
                    location=location,
                    context=context,
                    tolerance=self.tolerance,
                    reference=self._reference.input_after(call, name),
                )
                stats.append((context, leaf))
        if mutates:
            stats += self._check_expected(mutates, engine_inputs, calls, values_too)
        return stats

    def _check_expected(
        self,
        mutates: Mapping[str, Any],
        engine_inputs: Mapping[str, Any],
        calls: int,
        values_too: bool,
    ) -> list[tuple[str, LeafStats]]:
        __tracebackhide__ = True
        context = self._context(calls, calls, after=True)
        stats = []
        for name, expected in mutates.items():
            if callable(expected):
                args, kwargs = clone_tree(self._originals)
                expected = expected(*args, **kwargs)
            elif not values_too:
                continue
            leaf = assert_values(
                expected,
                engine_inputs[name],
                location=f"input '{name}'",
                context=context,
                tolerance=self.tolerance,
            )
            stats.append((context, leaf))
        return stats

    def _context(self, call: int, calls: int, *, after: bool = False) -> str:
        parts = []
        if after:
            parts.append(f"after {calls} call{'s' if calls > 1 else ''}")
        elif calls > 1:
            parts.append(f"call {call} of {calls}")
        if self.label:
            parts.append(self.label)
        return ", ".join(parts)


class Float64Reference:
    """Eager PyTorch in float64 on the same inputs, run only if a comparison needs it.

    It decides whether an element outside the default tolerance is the engine's error or
    ordinary float32 rounding that eager shares (see :mod:`pytest_aoti.compare`).
    """

    def __init__(
        self,
        program: AotiProgram,
        module: torch.nn.Module,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self._program = program
        self._module = module
        self._inputs = (args, kwargs)
        self._state: tuple[Any, Any, Any] | None = None
        self._history: list[tuple[Any, dict[str, Any]]] = []

    def outputs_after(self, call: int) -> Callable[[], Any]:
        """A callable giving the float64 outputs of call number ``call``."""
        return lambda: self._run_until(call)[0]

    def input_after(self, call: int, name: str) -> Callable[[], Any]:
        """A callable giving input ``name`` in float64 after ``call`` calls."""
        return lambda: self._run_until(call)[1][name]

    def _run_until(self, call: int) -> tuple[Any, dict[str, Any]]:
        import torch

        if self._state is None:
            module = copy.deepcopy(self._module).to(torch.float64)
            args, kwargs = to_float64(clone_tree(self._inputs))
            self._state = (module, args, kwargs)
        module, args, kwargs = self._state
        while len(self._history) < call:
            with torch.no_grad():
                outputs = clone_tree(module(*args, **kwargs))
            inputs = named_user_inputs(self._program.exported, args, kwargs)
            self._history.append((outputs, clone_tree(inputs)))
        return self._history[call - 1]


def _assert_in_place(tensor: torch.Tensor, address: int, location: str, context: str) -> None:
    __tracebackhide__ = True
    if tensor.data_ptr() != address:
        where = f" ({context})" if context else ""
        raise AotiCheckError(
            f"{location} was not updated in place by the AOTI engine{where}: "
            "its storage moved, so callers holding the tensor would see stale values"
        )


def clone_tree(tree: Any) -> Any:
    """Clone every tensor of a pytree, keeping everything else as is."""
    import torch
    import torch.utils._pytree as pytree

    return pytree.tree_map(
        lambda leaf: leaf.detach().clone() if isinstance(leaf, torch.Tensor) else leaf, tree
    )


def to_float64(tree: Any) -> Any:
    """Floating tensors of a pytree in float64; others unchanged."""
    import torch
    import torch.utils._pytree as pytree

    return pytree.tree_map(
        lambda leaf: (
            leaf.to(torch.float64)
            if isinstance(leaf, torch.Tensor) and leaf.is_floating_point()
            else leaf
        ),
        tree,
    )
