"""The header lines: torch's build, the C++ compiler (read without importing torch) and the
devices."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from importlib import metadata, util
from pathlib import Path


def torch_version() -> str:
    """torch's version, read without importing torch (it takes seconds)."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "not installed"


def torch_build() -> str:
    """``CPU`` or ``CUDA 12.8``: which build of torch is installed, without importing it."""
    spec = util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return "unknown"
    version_file = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        text = version_file.read_text()
    except OSError:
        return "unknown"
    for name, build in (("cuda", "CUDA"), ("hip", "ROCm")):
        match = re.search(rf"^{name}\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
        if match:
            return f"{build} {match.group(1)}"
    return "CPU"


def compiler_version() -> str:
    """First line of ``--version`` of the C++ compiler (``CXX`` or ``c++``)."""
    path = shutil.which(os.environ.get("CXX") or "c++") or shutil.which("g++")
    if path is None:
        return "none found (AOTInductor on CPU needs one)"
    try:
        output = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return path
    return output.splitlines()[0] if output else path


def header_lines(devices: Sequence[str], cache: str) -> list[str]:
    """The ``aoti: device=..., cache=...`` and torch build lines (C++ compiler for CPU)."""
    lines = [
        f"aoti: device={','.join(devices)}, cache={cache}",
        f"aoti: torch {torch_version()} ({torch_build()} build)",
    ]
    if any(name in ("cpu", "auto") for name in devices):
        lines[-1] += f", C++ compiler: {compiler_version()}"
    return lines


def describe_devices(names: Sequence[str]) -> str:
    """``cpu``, ``cuda:0 (NVIDIA H200, capability 9.0, TF32 matmul off, cuDNN TF32 on)``."""
    import torch  # torch loads on first use

    described = []
    for name in names:
        device = torch.device(name)
        if device.type != "cuda":
            described.append(name)
            continue
        try:
            index = device.index if device.index is not None else torch.cuda.current_device()
            major, minor = torch.cuda.get_device_capability(index)
            gpu = torch.cuda.get_device_name(index)
        except Exception as error:  # the header must never stop a run
            described.append(f"{name} (not described: {type(error).__name__})")
            continue
        described.append(
            f"cuda:{index} ({gpu}, capability {major}.{minor}, "
            f"TF32 matmul {_on(torch.backends.cuda.matmul.allow_tf32)}, "
            f"cuDNN TF32 {_on(torch.backends.cudnn.allow_tf32)})"
        )
    return ", ".join(described)


def _on(flag: bool) -> str:
    return "on" if flag else "off"
