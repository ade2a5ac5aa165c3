"""Digests of tensors' bytes for the program key, read in a thread while the module is
exported: hashlib lets go of the GIL, so on a large model the weights' read (about 0.3 s for
half a gigabyte) overlaps the export's Python instead of following it."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

Identity = tuple[Any, ...]


def tensor_digest(tensor: torch.Tensor) -> str:
    """sha256 of the tensor's elements in row-major order (its layout left out)."""
    import torch

    flat = tensor.detach().cpu().contiguous().reshape(-1)
    if flat.numel() and flat.stride() != (1,):  # one element at another stride
        flat = torch.empty(flat.shape, dtype=flat.dtype).copy_(flat)
    digest = hashlib.sha256()
    if flat.numel():
        digest.update(flat.view(torch.uint8).numpy().data)
    return digest.hexdigest()


def identity(tensor: torch.Tensor) -> Identity | None:
    """What a digest was taken of: the memory, its view and its version counter (an in-place
    write bumps it, so a tensor written since is digested again); None for a tensor without
    storage of its own (a functional or fake tensor)."""
    try:
        storage = tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None
    return (
        storage,
        tensor.storage_offset(),
        tuple(tensor.shape),
        tuple(tensor.stride()),
        tensor.dtype,
        tensor.device,
        tensor._version,
    )


class WeightDigests:
    """The digests of ``tensors`` (CPU ones), taken in a daemon thread from construction."""

    def __init__(self, tensors: Iterable[torch.Tensor]) -> None:
        self._pending = [t.detach() for t in tensors if t.device.type == "cpu"]
        self._digests: dict[Identity, str] = {}
        self._thread = threading.Thread(target=self._run, name="aoti-weight-digests", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for tensor in self._pending:
            seen = identity(tensor)  # before the read: a write during it changes the version
            if seen is None:
                continue
            try:
                self._digests[seen] = tensor_digest(tensor)
            except Exception:  # digested again where the key needs it
                continue

    def digest(self, tensor: torch.Tensor) -> str:
        """The digest of ``tensor``: the thread's, where it read this memory at this version,
        else read now."""
        self._thread.join()
        seen = identity(tensor)
        found = self._digests.get(seen) if seen is not None else None
        return found if found is not None else tensor_digest(tensor)
