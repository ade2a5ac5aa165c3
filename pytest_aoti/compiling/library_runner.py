"""A package's compiled library in torch's own AOTI runner, whose buffers can be read back. The
repro bundle's ``repro.py`` holds the same code; ``tests/triage/test_repro.py`` keeps the two
equal. No torch at import time: imports needing it are inside functions."""

from __future__ import annotations

import zipfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

RUNNERS = {"cpu": "AOTIModelContainerRunnerCpu", "cuda": "AOTIModelContainerRunnerCuda"}
"""The runner class of ``torch._C._aoti`` for each device type that has one."""


def aoti_runner_class(device_type: str) -> Any:
    """torch's private AOTI runner class for ``device_type``; None where this torch has none."""
    import torch

    return getattr(getattr(torch._C, "_aoti", None), RUNNERS.get(device_type, ""), None)


def extract_model_library(package: Path, target: Path) -> Path | str:
    """Extract the model's compiled library (``*.wrapper.so``) of the AOTInductor package
    ``package`` and the files beside it into ``target`` (a file already there is kept);
    return the library's path, or a sentence saying why it cannot be read back alone.

    Raises ``ValueError`` for a member name that would land outside ``target``, ``OSError``
    or ``zipfile.BadZipFile`` for a package that cannot be read.
    """
    with zipfile.ZipFile(package) as archive:
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
        for member in members:
            if PurePosixPath(member).parent == model_dir and not (target / member).exists():
                archive.extract(member, target)
    return target / libraries[0]


def _in_model(member: str) -> bool:
    return "/data/aotinductor/model/" in f"/{member}"


class LibraryRunner:
    """A package's compiled library in torch's own AOTI runner: a second instance of the
    engine's code, called with the same flat tensors, whose registered buffers can be read
    after each call (``extract_constants_map``). ``runner_class`` is
    :func:`aoti_runner_class`'s; its constructor raises where it cannot load the library."""

    def __init__(self, runner_class: Any, library: Path, device: torch.device) -> None:
        if device.type == "cuda":
            # the kernels' cubin files sit beside the library; the runner needs the device
            self.runner = runner_class(str(library), 1, str(device), str(library.parent))
        else:
            self.runner = runner_class(str(library), 1)
        self.fqns: dict[str, str] = dict(self.runner.get_constant_names_to_original_fqns())

    def __call__(self, *leaves: Any) -> list[torch.Tensor]:
        """One call on the tensors among ``leaves``, in order; the flat outputs."""
        import torch

        return list(self.runner.run([x for x in leaves if isinstance(x, torch.Tensor)]))

    def buffers(self, names: Iterable[str] | None = None) -> dict[str, torch.Tensor]:
        """Clones of the named buffers (module FQNs; all of them without ``names``) as the
        library holds them now; a name it does not hold is missing from the result."""
        constants = self.runner.extract_constants_map(False)
        by_fqn = {self.fqns.get(name, name): value for name, value in constants.items()}
        wanted = list(by_fqn) if names is None else [name for name in names if name in by_fqn]
        # the runner hands out views of its own buffers: the next call would change them
        return {name: by_fqn[name].detach().clone() for name in wanted}
