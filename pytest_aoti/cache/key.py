"""Content key of a program: a digest of everything that determines its compiled package, taken
before ``run_decompositions()`` so a hit skips decomposing. The graph's structure is digested (not
``torch.export.save`` bytes: unstable), then the weights' bytes; source locations are left out."""

from __future__ import annotations

import hashlib
import platform
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_aoti.cache.weight_digests import WeightDigests, tensor_digest
from pytest_aoti.compiling import machine
from pytest_aoti.compiling.program import ProgramKey

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram

KEY_FORMAT = "pytest-aoti-key-2"

# inductor options holding callables, whose repr is an address: uncacheable across
# processes unless the callable has a stable ``uuid()`` (torch's CustomGraphPass protocol)
_CALLABLE_OPTIONS = (
    "post_grad_custom_pre_pass",
    "post_grad_custom_post_pass",
    "joint_custom_pre_pass",
    "joint_custom_post_pass",
    "pre_grad_custom_pass",
    "_pre_fusion_custom_pass",
    "_post_fusion_custom_pass",
)

# options torch writes into the global config while compiling (platform metadata): left in,
# the first compile of a process would change every later key
_SELF_WRITTEN_OPTIONS = ("aot_inductor.metadata",)


def program_key(
    exported: ExportedProgram,
    *,
    device: torch.device,
    inductor_configs: Mapping[str, Any] | None,
    machine_dir: Path | None = None,
    machine_read_only: bool = False,
    weight_digests: WeightDigests | None = None,
) -> ProgramKey:
    """Digest of ``exported`` compiled for ``device`` under ``inductor_configs`` and the global
    inductor configuration. ``machine_dir`` keeps the host's compile target between runs
    (read-only with ``machine_read_only``); ``weight_digests`` holds the weights' digests
    where they were taken during the export."""
    configs, persistable = _config_fingerprint(inductor_configs or {})
    device_text = f"{_device_fingerprint(device)} {platform_fingerprint()}"
    if device.type in _HOST_COMPILED:
        # the instructions this host's compiled C++ may use, so a package from a newer CPU of
        # the same ISA class misses rather than dies of SIGILL
        target = machine.machine_target(machine_dir, write=not machine_read_only)
        device_text += f" host {target.fingerprint()}"
    state = [*sorted(exported.state_dict.items()), *sorted(exported.constants.items())]
    parts = {
        "graph": _digest_text(_graph_fingerprint(exported)),
        "weights": _digest_tensors(state, weight_digests),
        "configs": _digest_text(configs),
        "device": _digest_text(device_text),
        "torch": _digest_text(_torch_fingerprint()),
    }
    overall = hashlib.sha256(KEY_FORMAT.encode())
    for name in sorted(parts):
        overall.update(f"{name}={parts[name]};".encode())
    return ProgramKey(digest=overall.hexdigest()[:40], parts=parts, persistable=persistable)


def _digest_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _graph_fingerprint(exported: ExportedProgram) -> str:
    import torch.fx

    lines: list[str] = []
    for module_name, module in exported.graph_module.named_modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        lines.append(f"graph {module_name}")
        for node in module.graph.nodes:
            value = _describe_value(node.meta.get("val"))
            lines.append(f"{node.op} {node.name} {node.target} {node.args} {node.kwargs} {value}")
    lines.append(str(exported.graph_signature))
    lines.append(repr(sorted((str(k), str(v)) for k, v in exported.range_constraints.items())))
    lines.append(str(exported.call_spec.in_spec))
    lines.append(str(exported.call_spec.out_spec))
    return _canonical_symbols("\n".join(lines))


_SYMBOL = re.compile(r"\b[su]\d+\b")


def _canonical_symbols(text: str) -> str:
    """Rename shape symbols by first appearance: torch numbers them with a process-wide counter."""
    names: dict[str, str] = {}

    def rename(match: re.Match[str]) -> str:
        symbol = match.group(0)
        return names.setdefault(symbol, f"{symbol[0]}#{len(names)}")

    return _SYMBOL.sub(rename, text)


def _describe_value(value: Any) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        return f"{value.dtype}{tuple(str(s) for s in value.shape)}{tuple(str(s) for s in value.stride())}{value.device.type}"
    if isinstance(value, (list, tuple)):
        return "(" + ",".join(_describe_value(item) for item in value) + ")"
    return type(value).__name__ if value is not None else ""


def _digest_tensors(named: Iterable[tuple[str, Any]], weight_digests: WeightDigests | None) -> str:
    """Hash names, metadata and the digest of each tensor's bytes (sha256: ~25 ms per 42 MB)."""
    import torch

    digest = hashlib.sha256()
    read = weight_digests.digest if weight_digests else tensor_digest
    for name, value in named:
        if isinstance(value, torch.Tensor):
            tensor = value.detach()
            digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}:".encode())
            digest.update(read(tensor).encode())
        else:
            digest.update(f"{name}:{value!r}".encode())
    return digest.hexdigest()[:16]


def _config_fingerprint(inductor_configs: Mapping[str, Any]) -> tuple[str, bool]:
    """Inductor's global config under the overrides; False where a callable lacks ``uuid()``."""
    import torch._inductor.config as inductor_config

    items: dict[str, str] = {
        name: repr(value)
        for name, value in inductor_config.save_config_portable().items()
        if name not in _SELF_WRITTEN_OPTIONS
    }
    current = inductor_config.get_config_copy()
    for name in _CALLABLE_OPTIONS:
        items[name] = _callable_identity(current.get(name))
    for name, value in inductor_configs.items():
        items[name] = _callable_identity(value) if callable(value) else repr(value)
    persistable = not any(
        items.get(name, "None").startswith("<process-local") for name in _CALLABLE_OPTIONS
    )
    return repr(sorted(items.items())), persistable


def _callable_identity(value: Any) -> str:
    if value is None:
        return "None"
    uuid = getattr(value, "uuid", None)
    if callable(uuid):
        return f"uuid:{uuid()!r}"
    return f"<process-local {getattr(value, '__qualname__', type(value).__name__)} {id(value)}>"


def _device_fingerprint(device: torch.device) -> str:
    import torch

    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        # Inductor reads the TF32 switches while compiling: a TF32 package must not serve a run without
        tf32 = (
            f"tf32 matmul={torch.backends.cuda.matmul.allow_tf32} "
            f"cudnn={torch.backends.cudnn.allow_tf32} "
            f"precision={torch.get_float32_matmul_precision()}"
        )
        return f"cuda sm_{major}{minor} {torch.version.cuda} {tf32}"
    if device.type == "cpu":
        # CPU kernels target the host's ISA: an AVX-512 package must not load on AVX2
        return f"cpu {platform.machine()} {torch.backends.cpu.get_cpu_capability()}"
    return device.type


# devices whose packages hold C++ built with ``-march=native`` (CUDA's host-side wrapper too)
_HOST_COMPILED = ("cpu", "cuda")


def platform_fingerprint() -> str:
    """The OS and C library (``Linux glibc 2.36``): another's package may not load here."""
    libc, version = platform.libc_ver()
    return f"{platform.system()} {libc or 'libc'} {version or 'unknown'}"


def _torch_fingerprint() -> str:
    import torch

    return f"{torch.__version__} {getattr(torch.version, 'git_version', '')}"
