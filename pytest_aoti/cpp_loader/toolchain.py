"""What building the runner needs from the machine, found without importing torch: a C++
compiler (``CXX``, else ``c++``, else ``g++``) and torch's C++ headers. Each missing part is a
reason, one line, why the check skips on this machine."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from importlib import util
from pathlib import Path

LOADER_HEADER = "torch/csrc/inductor/aoti_package/model_package_loader.h"
"""The header of ``torch::inductor::AOTIModelPackageLoader``, under torch's include folder."""

Which = Callable[[str], "str | None"]


def find_compiler(
    environ: Mapping[str, str] | None = None, which: Which = shutil.which
) -> tuple[str | None, str]:
    """``(compiler path, "")``, or ``(None, why there is none)``. A ``CXX`` that is set is the
    one compiler asked for: it is not replaced by another when it is missing."""
    env = os.environ if environ is None else environ
    asked = env.get("CXX", "").strip()
    if asked:
        found = which(asked)
        return (found, "") if found else (None, f"no C++ compiler: CXX={asked} is not found")
    for name in ("c++", "g++"):
        found = which(name)
        if found:
            return found, ""
    return None, "no C++ compiler: neither c++ nor g++ is on PATH (CXX names another)"


def torch_folder() -> Path | None:
    """The installed torch package's folder, without importing it."""
    spec = util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def headers_reason(folder: Path | None) -> str:
    """Why torch's C++ headers cannot build the runner ("" when they can)."""
    if folder is None:
        return "no torch installed"
    if not (folder / "include" / LOADER_HEADER).is_file():
        return f"no torch C++ headers: {LOADER_HEADER} is not under {folder / 'include'}"
    return ""


def machine_reason(environ: Mapping[str, str] | None = None, which: Which = shutil.which) -> str:
    """Why this machine cannot build the runner ("" when it may): the compiler, the headers."""
    compiler, why = find_compiler(environ, which)
    if compiler is None:
        return why
    return headers_reason(torch_folder())


def compiler_identity(path: str) -> str:
    """The compiler as it enters the build key: its resolved file, size, change time and the
    first line of its ``--version``."""
    resolved = os.path.realpath(path)
    try:
        st = os.stat(resolved)
        stamp = f"size={st.st_size} mtime_ns={st.st_mtime_ns}"
    except OSError:
        stamp = "unreadable"
    try:
        output = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        output = ""
    version = output.splitlines()[0] if output.strip() else "unknown version"
    return f"{path} -> {resolved} {stamp}: {version}"
