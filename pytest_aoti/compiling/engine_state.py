"""Reading an engine's registered buffers back, the one place that uses torch's private runner.

torch's package loader (``aoti_load_package``) runs a package but exposes no buffer values.
The package's compiled library can be run by torch's own runner instead
(``torch._C._aoti.AOTIModelContainerRunnerCpu``/``...Cuda``), which also hands out its
constants, the buffers among them (``extract_constants_map``). A :class:`StateEngine` is that
runner: a second instance of the same compiled code, called with the same inputs as the
engine under test, whose buffers can be read after each call.

Everything here is private to torch and may change: where the runner is missing, its
constructor differs, the device has none or the package keeps its weights outside the
library, :func:`open_state_engine` returns the reason instead (the buffers are then
reported "not verified", never silently skipped).
"""

from __future__ import annotations

import threading
import zipfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

RUNNERS = {"cpu": "AOTIModelContainerRunnerCpu", "cuda": "AOTIModelContainerRunnerCuda"}
"""The runner class of ``torch._C._aoti`` for each device type that has one."""

_extract_lock = threading.Lock()


class StateEngine:
    """The package's compiled library in torch's runner: call it like the engine, then read
    its buffers with :meth:`buffers`."""

    def __init__(self, runner: Any, fqns: dict[str, str]) -> None:
        import torch.utils._pytree as pytree

        self._runner = runner
        self._fqns = fqns
        in_spec, out_spec = runner.get_call_spec()
        self._in_spec = pytree.treespec_loads(in_spec)
        self._out_spec = pytree.treespec_loads(out_spec)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run one call; inputs are flattened the way ``aoti_load_package``'s engine does."""
        import torch
        import torch.utils._pytree as pytree
        from torch.export._tree_utils import reorder_kwargs

        flat = pytree.tree_flatten((args, reorder_kwargs(kwargs, self._in_spec)))[0]
        tensors = [leaf for leaf in flat if isinstance(leaf, torch.Tensor)]
        return pytree.tree_unflatten(self._runner.run(tensors), self._out_spec)

    def buffers(self, names: Iterable[str]) -> dict[str, torch.Tensor]:
        """Clones of the named buffers (module FQNs) as the engine holds them now; a name the
        library does not hold is missing from the result."""
        constants = self._runner.extract_constants_map(False)
        by_fqn = {self._fqns.get(name, name): value for name, value in constants.items()}
        # the runner hands out views of its own buffers: the next call would change them
        return {name: by_fqn[name].detach().clone() for name in names if name in by_fqn}


def open_state_engine(
    package_path: Path, device: torch.device, names: Iterable[str]
) -> StateEngine | str:
    """A fresh :class:`StateEngine` of ``package_path`` on ``device`` whose buffers start in
    their exported state, or why there is none (a sentence for "not verified: ...").

    The package is extracted once, beside it (the session's private folder), into
    ``<package>.state/``; each call here builds a new runner, with its own buffers.
    """
    import torch

    runner_class = getattr(getattr(torch._C, "_aoti", None), RUNNERS.get(device.type, ""), None)
    if runner_class is None:
        return (
            f"this torch ({torch.__version__}) has no AOTI runner for {device.type} to read buffers"
        )
    try:
        library = _extracted_library(package_path)
    except (OSError, zipfile.BadZipFile, ValueError) as error:
        return f"the package's library could not be extracted ({error})"
    if isinstance(library, str):
        return library
    try:
        if device.type == "cuda":
            # the kernels' cubin files sit beside the library; the runner needs the device
            runner = runner_class(str(library), 1, str(device), str(library.parent))
        else:
            runner = runner_class(str(library), 1)
        fqns = dict(runner.get_constant_names_to_original_fqns())
    except (TypeError, RuntimeError, AttributeError) as error:
        first = (str(error).splitlines() or [type(error).__name__])[0][:160]
        return f"torch's AOTI runner could not load the package's library ({first})"
    state = StateEngine(runner, fqns)
    missing = sorted(set(names) - set(state.buffers(names)))
    if missing:
        listed = ", ".join(repr(name) for name in missing)
        # e.g. aot_inductor.package_constants_in_so=False: the weights live outside it
        return f"the package's compiled library does not hold {listed}"
    return state


def _extracted_library(package_path: Path) -> Path | str:
    """The model's ``*.wrapper.so`` of the package, extracted beside it once; a string where
    the package cannot be read back (weights outside the library)."""
    target = package_path.with_name(package_path.name + ".state")
    with _extract_lock:
        with zipfile.ZipFile(package_path) as archive:
            members = archive.namelist()
            for member in members:  # nothing may land outside the folder
                if ".." in PurePosixPath(member).parts or member.startswith("/"):
                    raise ValueError(f"unsafe member name {member!r}")
            libraries = [m for m in members if _in_model(m) and m.endswith(".wrapper.so")]
            if len(libraries) != 1:
                return "the package holds no single compiled model library"
            if any("/data/weights/" in f"/{m}" or "/data/constants/" in f"/{m}" for m in members):
                # package_constants_in_so=False: the library alone starts with no weights
                return "the package keeps its weights outside its compiled library"
            model_dir = PurePosixPath(libraries[0]).parent
            wanted = [m for m in members if PurePosixPath(m).parent == model_dir]
            for member in wanted:
                if not (target / member).exists():
                    archive.extract(member, target)
    return target / libraries[0]


def _in_model(member: str) -> bool:
    return "/data/aotinductor/model/" in f"/{member}"
