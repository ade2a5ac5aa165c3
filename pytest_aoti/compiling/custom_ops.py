"""The custom ops a compiled package calls (the targets of the extern-kernel nodes AOTInductor
writes in ``data/aotinductor/<model>/*.json``), and what a fresh process needs to call them: an
engine calls a ``torch.library`` op by name, so the engine child imports the modules that
registered the ops here and loads the same op libraries."""

from __future__ import annotations

import json
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class ChildPreparation:
    """What a fresh process does before it calls a package's engine."""

    imports: tuple[tuple[str, str], ...] = ()
    """``(module name, file)`` of each module that registered an op the package calls."""
    libraries: tuple[str, ...] = ()
    """The op libraries this process loaded (``torch.ops.load_library``)."""
    path: tuple[str, ...] = ()
    """This process's ``sys.path``, for those modules' own imports."""
    unfound: tuple[str, ...] = ()
    """Ops whose registering module was not found: a fresh process cannot call them."""

    def request(self) -> dict[str, Any]:
        """The child request's keys for it (see :mod:`pytest_aoti.isolation.child`)."""
        return {"imports": [list(pair) for pair in self.imports], "libraries": list(self.libraries)}


def called_ops(package: Path) -> set[str]:
    """The qualified names (``ns::op``) of the extern ops ``package``'s engine calls."""
    names: set[str] = set()
    try:
        with zipfile.ZipFile(package) as archive:
            for info in archive.infolist():
                if "/data/aotinductor/" not in f"/{info.filename}" or not info.filename.endswith(
                    ".json"
                ):
                    continue
                try:
                    data = json.loads(archive.read(info))
                except ValueError:
                    continue
                for node in (data.get("nodes") or []) if isinstance(data, dict) else []:
                    target = (node.get("node") or {}).get("target")
                    if isinstance(target, str):
                        names.add(target.split(".", 1)[0] if "::" in target else target)
    except (OSError, zipfile.BadZipFile):
        return set()
    return names


def child_preparation(package: Path) -> ChildPreparation:
    """The modules that registered the ops ``package`` calls, and the op libraries loaded here."""
    import torch

    user_defined = set(getattr(torch.library, "_defs", ()))
    wanted = sorted(op for op in called_ops(package) if op in user_defined)
    imports: dict[str, str] = {}
    unfound: list[str] = []
    for op in wanted:
        module = _registering_module(op)
        if module is not None and _is_torch_own(module):
            continue  # a fresh process registers torch's own ops by importing torch
        file = getattr(module, "__file__", None)
        if module is not None and file:
            imports[module.__name__] = str(file)
        else:
            unfound.append(op)
    return ChildPreparation(
        imports=tuple(imports.items()),
        libraries=tuple(sorted(getattr(torch.ops, "loaded_libraries", ()))),
        path=tuple(entry for entry in sys.path if isinstance(entry, str)),
        unfound=tuple(unfound),
    )


def _registering_module(op: str) -> ModuleType | None:
    """The module that defined ``op``, or one holding its ``Library`` or custom op object."""
    import torch
    from torch._library.custom_ops import OPDEFS, CustomOpDef

    definition = OPDEFS.get(op)
    if definition is not None:
        module = sys.modules.get(getattr(definition._init_fn, "__module__", "") or "")
        if module is not None and module.__name__ != "__main__":
            return module
    namespace, _, name = op.partition("::")
    for module in _loaded_modules():
        for value in list(vars(module).values()):
            # type(), not isinstance: a lazy or deprecated object may warn on __class__
            kind = type(value)
            if issubclass(kind, CustomOpDef) and value._qualname == op:
                return module
            if issubclass(kind, torch.library.Library) and value.ns == namespace:
                if name in {defined.split("::")[-1].split(".")[0] for defined in value._op_defs}:
                    return module
    return None


def _loaded_modules() -> Iterator[ModuleType]:
    """The loaded modules with a file, torch's own left out (the child has those)."""
    for module in list(sys.modules.values()):
        if (
            isinstance(module, ModuleType)
            and getattr(module, "__file__", None)
            and not _is_torch_own(module)
        ):
            yield module


def _is_torch_own(module: ModuleType) -> bool:
    return module.__name__ == "torch" or module.__name__.startswith("torch.")
