"""Engine calls answered from the engine child: the crash screen made them there first, so the
check takes the child's outputs (and the inputs it left) instead of making them again, and the
test process loads no engine for them. A call the child did not make is made by an engine
loaded here, on first need."""

from __future__ import annotations

import hashlib
import statistics
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.utils._pytree as pytree

from pytest_aoti.mutation_maps import flat_user_inputs

if TYPE_CHECKING:
    from pytest_aoti.compiling.program import AotiProgram


class ServedCalls:
    """The calls the engine child made for one check, by the inputs each call received."""

    def __init__(self, device: torch.device | None = None) -> None:
        self.device = device
        """Where the engine returns its outputs (the program's device)."""
        self._calls: dict[str, dict[str, Any]] = {}
        self._seconds: dict[str, list[float]] = {}
        self._lock = threading.Lock()
        self.served = 0
        """Calls answered from the child's outputs."""
        self.made_here = 0
        """Calls the engine loaded in this process made (the child did not make them)."""

    def keep(self, inputs: Sequence[torch.Tensor], calls: Sequence[dict[str, Any]]) -> None:
        """Keep the child's calls on ``inputs`` (:func:`child_calls`)."""
        with self._lock:
            for received, call in child_calls(inputs, calls, self.device):
                self._calls[call_key(received)] = call

    def keep_seconds(self, inputs: Sequence[torch.Tensor], seconds: Sequence[float]) -> None:
        """Keep the seconds of the child's timed calls on ``inputs``."""
        if seconds:
            with self._lock:
                self._seconds[call_key(list(inputs))] = list(seconds)

    def answer(self, inputs: Sequence[torch.Tensor]) -> dict[str, Any] | None:
        """The child's call on ``inputs``, if it made one."""
        if not self._calls:
            return None
        with self._lock:
            return self._calls.get(call_key(inputs))

    def seconds(self, inputs: Sequence[torch.Tensor]) -> float | None:
        """Median seconds of one call on ``inputs`` timed in the child; None if not timed."""
        if not self._seconds:
            return None
        samples = self._seconds.get(call_key(inputs))
        return statistics.median(samples) if samples else None


class ServedEngine:
    """The check's engine (``context.engine()``): calls the child made are answered from its
    outputs, others go to the engine ``load`` returns (called once, on first need)."""

    def __init__(self, program: AotiProgram, served: ServedCalls, load: Callable[[], Any]) -> None:
        self.program = program
        self.served = served
        self._load = load
        self._loaded: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        tensors = tensor_inputs(self.program, args, kwargs)
        call = self.served.answer(tensors)
        if call is None:  # a call the child did not make: called here
            return self._made_here(args, kwargs)
        written = [
            (mine, after)
            for mine, after in zip(tensors, call["inputs"])
            if element_bytes(mine) != element_bytes(after)
        ]
        if any(_overlaps(mine) for mine, _ in written):  # no copy can write it: called here
            return self._made_here(args, kwargs)
        self.served.served += 1
        with torch.no_grad():
            for mine, after in written:
                mine.copy_(after)  # what the engine wrote into its inputs, here too
        leaves, spec = pytree.tree_flatten(call["outputs"])
        answered = [
            # an output that is an input: the caller's tensor, as the engine returns it
            tensors[alias].as_strided(leaf.size(), leaf.stride(), leaf.storage_offset())
            if alias >= 0
            else (leaf.clone() if isinstance(leaf, torch.Tensor) else leaf)
            for leaf, alias in zip(leaves, call["aliases"])
        ]
        return pytree.tree_unflatten(answered, spec)

    def _made_here(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The call made by the engine loaded in this process, counted as such."""
        self.served.made_here += 1
        return self.loaded()(*args, **kwargs)

    def loaded(self) -> Any:
        """The engine loaded in this process (loaded now, on first need)."""
        if self._loaded is None:
            self._loaded = self._load()
        return self._loaded


def child_calls(
    inputs: Sequence[torch.Tensor], calls: Sequence[dict[str, Any]], device: torch.device | None
) -> Iterator[tuple[list[torch.Tensor], dict[str, Any]]]:
    """The child's calls on ``inputs``, each with the inputs it received: call k received
    call k-1's inputs after it. What the child returns comes back on the CPU: the inputs go
    back to their devices, the outputs to ``device`` (None: the first input's)."""
    received = list(inputs)
    to = device or (received[0].device if received else None)
    for call in calls:
        before = received
        received = [after.to(mine.device) for after, mine in zip(call["inputs"], before)]
        outputs = call["outputs"]
        if to is not None:
            outputs = pytree.tree_map_only(torch.Tensor, lambda leaf: leaf.to(to), outputs)
        yield before, {**call, "inputs": received, "outputs": outputs}


def tensor_inputs(program: AotiProgram, args: Any, kwargs: Any) -> list[torch.Tensor]:
    """The tensors the engine receives for ``(args, kwargs)``, in its order."""
    flat = flat_user_inputs(program.exported, tuple(args), dict(kwargs))
    return [leaf for leaf in flat if isinstance(leaf, torch.Tensor)]


def call_key(tensors: Sequence[torch.Tensor]) -> str:
    """What an engine call's result depends on: each tensor's layout, device, which
    storages the tensors share, and every element's bytes."""
    digest = hashlib.blake2b(digest_size=20)
    storages: dict[int, int] = {}
    for tensor in tensors:
        pointer = tensor.untyped_storage().data_ptr()
        group = storages.setdefault(pointer, len(storages)) if pointer else -1
        layout = (
            tuple(tensor.shape),
            str(tensor.dtype),
            tensor.stride(),
            tensor.storage_offset(),
            str(tensor.device),
            group,
        )
        digest.update(repr(layout).encode())
        digest.update(element_bytes(tensor))
    return digest.hexdigest()


def _overlaps(tensor: torch.Tensor) -> bool:
    """Whether elements of ``tensor`` share memory (an expanded dim): a copy into it fails."""
    return any(stride == 0 and size > 1 for size, stride in zip(tensor.shape, tensor.stride()))


def element_bytes(tensor: torch.Tensor) -> bytes:
    """Every element's bytes, in order."""
    if tensor.numel() == 0:
        return b""
    # a fresh dense copy on the CPU: a one-element view keeps its stride through contiguous()
    dense = torch.empty(tuple(tensor.shape), dtype=tensor.dtype).copy_(tensor.detach())
    return dense.reshape(-1).view(torch.uint8).numpy().tobytes()
