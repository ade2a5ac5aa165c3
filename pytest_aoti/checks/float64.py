"""Eager PyTorch in float64 on a check's inputs: the reference of the fp64 rule."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.utils._pytree as pytree

from pytest_aoti.checks.module_copy import copy_module
from pytest_aoti.compiling.graph_ops import first_call_of
from pytest_aoti.mutation_maps import named_user_inputs
from pytest_aoti.tolerance import NoReference
from pytest_aoti.trees import clone_tree

if TYPE_CHECKING:
    from pytest_aoti.compiling.program import AotiProgram

PRECISION_DEPENDENT_OPS = frozenset({"nextafter"})
"""Ops whose result is defined by the dtype's precision (``nextafter`` steps one ulp): in float64
they mean something else, so the fp64 rule never rescues a program that calls one."""


class Float64Reference:
    """Eager in float64 on the same inputs, run only if a comparison needs it. ``shared``
    gives a search's float64 copy of the module in its first state (the input sets of a
    search share one); without it, the reference makes a copy of its own."""

    def __init__(
        self,
        program: AotiProgram,
        module: torch.nn.Module,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        shared: Callable[[], torch.nn.Module] | None = None,
    ) -> None:
        self._program = program
        self._module = module
        self._shared = shared
        self._inputs = (args, kwargs)
        self._state: tuple[Any, Any, Any] | None = None
        self._history: list[tuple[Any, dict[str, Any]]] = []
        self._buffers: list[dict[str, Any]] = []

    def outputs_after(self, call: int) -> Callable[[], Any]:
        """A callable giving the float64 outputs of call number ``call``."""
        return lambda: self._run_until(call)[0]

    def input_after(self, call: int, name: str) -> Callable[[], Any]:
        """A callable giving input ``name`` in float64 after ``call`` calls."""
        return lambda: self._run_until(call)[1][name]

    def buffer_at(self, call: int) -> Callable[[str], Callable[[], Any]]:
        """Per buffer name, a callable giving that buffer in float64 after ``call`` calls."""

        def reference(name: str) -> Callable[[], Any]:
            def value() -> Any:
                self._run_until(call)
                return self._buffers[call - 1][name]

            return value

        return reference

    def _run_until(self, call: int) -> tuple[Any, dict[str, Any]]:
        if len(self._history) >= call:
            return self._history[call - 1]
        if self._state is None or self._shared is not None:
            graph = self._program.exported.graph
            if (op := first_call_of(graph, PRECISION_DEPENDENT_OPS)) is not None:
                raise NoReference(
                    f"the program calls {op}, whose result depends on the dtype's precision: "
                    "float64 is no reference for it"
                )
            if self._shared is not None:
                # another input set may have run the shared copy since: from the first call
                module = self._shared()
                self._history, self._buffers = [], []
            else:
                module = copy_module(self._module).to(torch.float64)
            args, kwargs = to_float64(clone_tree(self._inputs))
            self._state = (module, args, kwargs)
        module, args, kwargs = self._state
        while len(self._history) < call:
            with torch.no_grad():
                outputs = clone_tree(module(*args, **kwargs))
            inputs = named_user_inputs(self._program.exported, args, kwargs)
            self._history.append((outputs, clone_tree(inputs)))
            self._buffers.append(
                {name: buffer.detach().clone() for name, buffer in module.named_buffers()}
            )
        return self._history[call - 1]


def to_float64(tree: Any) -> Any:
    """Floating tensors of a pytree in float64; others unchanged."""
    return pytree.tree_map(
        lambda leaf: (
            leaf.to(torch.float64)
            if isinstance(leaf, torch.Tensor) and leaf.is_floating_point()
            else leaf
        ),
        tree,
    )
