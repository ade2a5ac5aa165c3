"""What a failure replays in its repro bundle (:class:`InputReplay`): an input set on the
module, the number of calls, and the weight set a weight swap loaded into the engine."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_aoti.checks.side_by_side import call_history, eager_module

if TYPE_CHECKING:
    import torch

    from pytest_aoti.compiling.program import AotiProgram


@dataclass(frozen=True)
class InputReplay:
    """The input set and the number of calls a failure happened on; for a failed weight
    swap, the weight set the engine and eager held."""

    module: torch.nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    calls: int
    weight_set: Callable[[], Mapping[str, torch.Tensor]] | None = None
    """The new weights by state-dict name, drawn again when asked: the failure does not
    hold a model-sized set for as long as pytest keeps it; None: the compiled weights."""
    step_inputs: tuple[tuple[tuple[Any, ...], dict[str, Any]], ...] | None = None
    """A decode loop's inputs of each call, ``calls`` of them (the first is ``args`` and
    ``kwargs``); None: every call on one copy of ``args`` and ``kwargs``."""

    def weights(self) -> Mapping[str, torch.Tensor]:
        """The weight set loaded into the engine before the calls (empty: the compiled)."""
        return {} if self.weight_set is None else self.weight_set()

    def eager_run(
        self, program: AotiProgram, *, buffers: bool = False
    ) -> tuple[list[tuple[Any, dict[str, Any]]], list[dict[str, Any]] | None]:
        """One eager run of the replay, holding its weight set: per call, eager's outputs
        and every named input after the call; with ``buffers``, also per call the
        registered buffers the program mutates, after the call (else None)."""
        import torch

        eager = eager_module(self.module)
        weights = dict(self.weights())
        names = sorted(program.mutated_buffers)
        states: list[dict[str, Any]] = []

        def read_buffers() -> None:
            live = dict(eager.named_buffers())
            states.append({name: live[name].detach().clone() for name in names})

        def held(*args: Any, **kwargs: Any) -> Any:
            return torch.func.functional_call(eager, weights, args, kwargs)

        function = held if weights else eager
        after_call = read_buffers if buffers else None
        if self.step_inputs is None:
            results = call_history(
                program, function, self.args, self.kwargs, self.calls, after_call=after_call
            )
        else:  # one module through the steps: its buffers carry from call to call
            results = [
                record
                for args, kwargs in self.step_inputs
                for record in call_history(
                    program, function, args, kwargs, 1, after_call=after_call
                )
            ]
        return results, (states if buffers else None)
