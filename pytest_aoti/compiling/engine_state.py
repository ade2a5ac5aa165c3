"""Reading an engine's registered buffers back (``aoti_load_package`` exposes none): a
:class:`StateEngine` is a second instance of the package's library in torch's private runner
(:mod:`~pytest_aoti.compiling.library_runner`), called with the engine's inputs; where it cannot
work, :func:`open_state_engine` returns the reason, reported as "not verified"."""

from __future__ import annotations

import threading
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_aoti.compiling.library_runner import (
    LibraryRunner,
    aoti_runner_class,
    extract_model_library,
)

if TYPE_CHECKING:
    import torch

_extract_lock = threading.Lock()


class StateEngine:
    """The package's library in torch's runner: call it like the engine, then read its buffers."""

    def __init__(self, library: LibraryRunner) -> None:
        import torch.utils._pytree as pytree

        self._library = library
        in_spec, out_spec = library.runner.get_call_spec()
        self._in_spec = pytree.treespec_loads(in_spec)
        self._out_spec = pytree.treespec_loads(out_spec)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run one call; inputs are flattened the way ``aoti_load_package``'s engine does."""
        import torch.utils._pytree as pytree
        from torch.export._tree_utils import reorder_kwargs

        flat = pytree.tree_flatten((args, reorder_kwargs(kwargs, self._in_spec)))[0]
        return pytree.tree_unflatten(self._library(*flat), self._out_spec)

    def buffers(self, names: Iterable[str]) -> dict[str, torch.Tensor]:
        """Clones of the named buffers (FQNs) it holds now; names it lacks are left out."""
        return self._library.buffers(names)


def open_state_engine(
    package_path: Path, device: torch.device, names: Iterable[str]
) -> StateEngine | str:
    """A fresh :class:`StateEngine` of ``package_path`` (extracted once, into ``<package>.state/``)
    with buffers in their exported state, or why there is none (for "not verified: ...")."""
    import torch

    runner_class = aoti_runner_class(device.type)
    if runner_class is None:
        return (
            f"this torch ({torch.__version__}) has no AOTI runner for {device.type} to read buffers"
        )
    try:
        with _extract_lock:
            target = package_path.with_name(package_path.name + ".state")
            library = extract_model_library(package_path, target)
    except (OSError, zipfile.BadZipFile, ValueError) as error:
        return f"the package's library could not be extracted ({error})"
    if isinstance(library, str):
        return library
    try:
        runner = LibraryRunner(runner_class, library, device)
    except (TypeError, RuntimeError, AttributeError) as error:
        first = (str(error).splitlines() or [type(error).__name__])[0][:160]
        return f"torch's AOTI runner could not load the package's library ({first})"
    state = StateEngine(runner)
    missing = sorted(set(names) - set(state.buffers(names)))
    if missing:
        listed = ", ".join(repr(name) for name in missing)
        # e.g. aot_inductor.package_constants_in_so=False: the weights live outside it
        return f"the package's compiled library does not hold {listed}"
    return state
