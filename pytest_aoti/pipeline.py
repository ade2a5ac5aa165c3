"""The torch calls that turn a module into a loaded AOTInductor engine, one function a step.

export → run_decompositions → aoti_compile_and_package → aoti_load_package. Each step turns
torch's long internal traceback into a short :mod:`pytest_aoti.errors` error that says what
failed and what to try; the original exception is not chained (``from None``) because its
traceback is internal to torch and hides the user's own line.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_aoti.errors import AotiCompileError, AotiExportError

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram

_EXPORT_HINT = (
    "What to try: strict=False (or strict=True), a dynamic_shapes spec that matches the "
    "model, or torch.export.draft_export(module, args) to list every problem at once."
)


@contextlib.contextmanager
def quiet_torch_deprecations() -> Iterator[None]:
    """Hide torch's noise about itself while it exports and compiles.

    Deprecation warnings raised inside torch concern torch's internals, not the user's
    code, and would turn into errors under ``filterwarnings = error``. torch's structured
    trace log (``torch.__trace``) logs every compile step at DEBUG for its own TORCH_TRACE
    handler; where pytest's log handlers end up on that logger, they would fill the
    "Captured log" section of every failed test with hundreds of empty lines.
    """
    trace_log = logging.getLogger("torch.__trace")
    if not any(isinstance(f, _TorchTraceOnly) for f in trace_log.filters):
        trace_log.addFilter(_TorchTraceOnly())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


class _TorchTraceOnly(logging.Filter):
    """Let torch's structured trace records through only when TORCH_TRACE asked for them."""

    def filter(self, record: logging.LogRecord) -> bool:
        return bool(os.environ.get("TORCH_TRACE"))


def export_module(
    module: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    dynamic_shapes: Any = None,
    strict: bool | None = None,
) -> ExportedProgram:
    """``torch.export.export`` with a short error in place of torch's traceback."""
    import torch

    options: dict[str, Any] = {"dynamic_shapes": dynamic_shapes}
    if strict is not None:
        options["strict"] = strict
    try:
        with quiet_torch_deprecations():
            return torch.export.export(module, tuple(args), dict(kwargs), **options)
    except Exception as error:  # torch raises many unrelated types here
        message = f"export failed: {summarize_torch_error(error)}\n{_EXPORT_HINT}"
    raise AotiExportError(message)


def decompose(exported: ExportedProgram) -> ExportedProgram:
    """``run_decompositions()``: functionalizes in-place ops into mutation outputs."""
    try:
        with quiet_torch_deprecations():
            decomposed: ExportedProgram = exported.run_decompositions()
            return decomposed
    except Exception as error:
        message = f"run_decompositions failed: {summarize_torch_error(error)}"
    raise AotiExportError(message)


def compile_package(
    decomposed: ExportedProgram,
    package_path: Path,
    inductor_configs: Mapping[str, Any] | None,
) -> Path:
    """AOT-compile ``decomposed`` into a ``.pt2`` package at ``package_path``."""
    import torch._inductor

    package_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with quiet_torch_deprecations():
            written = torch._inductor.aoti_compile_and_package(
                decomposed,
                package_path=str(package_path),
                inductor_configs=dict(inductor_configs or {}),
            )
    except Exception as error:
        message = f"AOTI compile failed: {summarize_torch_error(error)}"
    else:
        return Path(written)
    raise AotiCompileError(message)


def load_engine(package_path: Path, device: torch.device | None = None) -> Any:
    """Load a ``.pt2`` package into a callable engine (milliseconds once inductor is imported)."""
    import torch._inductor

    # the runner binds to the device index it was compiled for; loading on another index
    # of the same type is done by the package's own device_index argument
    options: dict[str, Any] = {}
    if device is not None and device.type == "cuda" and device.index is not None:
        options["device_index"] = device.index
    try:
        with quiet_torch_deprecations():
            return torch._inductor.aoti_load_package(str(package_path), **options)
    except Exception as error:
        message = f"loading the AOTI package {package_path} failed: {summarize_torch_error(error)}"
    raise AotiCompileError(message)


_USER_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_TORCH_PATH = re.compile(r"[/\\](torch|functorch|torchgen)[/\\]")
_REASON_LINE = re.compile(
    r"^\s*(Explanation|Hint|Suggested fix)\b:?|:\d+(:\d+)?: (fatal )?error:|^\s*error:",
    re.IGNORECASE,
)


def summarize_torch_error(error: BaseException, max_lines: int = 4) -> str:
    """First line of a torch error, its explanation or hint, and the user's frame.

    torch's export and compile errors run to dozens of lines of guidance and graph dumps;
    the first line states the reason and the rest rarely adds more than a hint and the
    location in the user's code.
    """
    text = str(error).strip() or type(error).__name__
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    picked = [lines[0].strip()]
    for line in lines[1:]:
        if _REASON_LINE.search(line) and line.strip() not in picked:
            picked.append(line.strip())
            break
    for line in lines:
        frame = _USER_FRAME.match(line)
        if frame and not _TORCH_PATH.search(frame["file"]):
            picked.append(f"at {frame['file']}:{frame['line']} in {frame['func']}")
            break
    return "\n".join(picked[:max_lines])
