"""The torch calls that turn a module into a loaded AOTInductor engine, one function a step.

export → run_decompositions → aoti_compile_and_package → aoti_load_package. A failing step
raises a :mod:`pytest_aoti.errors` error whose first line names the step and the reason;
the lines below give the innermost source line outside torch where it happened (the
model's own, or its library's), the rest of torch's reason (its suggested fixes,
constraint details and hints, without its logging boilerplate) and what to try for that
kind of failure. torch's exception is chained as ``__cause__``.
"""

from __future__ import annotations

import contextlib
import linecache
import logging
import os
import re
import sys
import sysconfig
import types
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_aoti.compiling.hints import for_mode, library_type_hint
from pytest_aoti.errors import AotiCompileError, AotiExportError

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram

_EXPORT_HINT = (
    "What to try: strict=False (or strict=True), a dynamic_shapes spec that matches the "
    "model, or torch.export.draft_export(module, args) to list every problem at once."
)
_DATA_DEPENDENT_HINT = (
    "What to try: the model branches on (or sizes by) a tensor's values, which export "
    "cannot trace. Write the branch as torch.cond(pred, true_fn, false_fn, operands), or "
    "compute both sides and pick with torch.where; where the value only decides a size or "
    "an assert, export with strict=False and state the fact with torch._check(...). "
    "torch.export.draft_export(module, args) lists every such place at once."
)
_DECOMPOSE_HINT = (
    "What to try: the module exported, so this is torch's decomposition of the program: "
    "strict=True (or strict=False) traces it differently; "
    "torch.export.export(module, args).run_decompositions() reproduces it for a PyTorch "
    "bug report."
)
_VIEW_HINT = (
    "What to try: the decomposed program lays this tensor out differently from eager, so "
    ".view() cannot reinterpret it: use .reshape() (or .contiguous().view()) at the line "
    "above; in a library model, choose another implementation of the layer (for Hugging "
    'Face models, attn_implementation="eager" instead of "sdpa").'
)
_COMPILE_HINT = (
    "What to try: the program exported and decomposed, so Inductor failed on it: other "
    "inductor_configs (without custom passes), or report it to PyTorch with the program "
    "saved by torch.export.save(torch.export.export(module, args), 'repro.pt2')."
)
_COMPILER_HINT = (
    "What to try: install a C++ compiler (g++), or name a working one with "
    "inductor_configs={'cpp.cxx': (None, 'g++')}."
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
    options: Mapping[str, Any] | None = None,
) -> ExportedProgram:
    """``torch.export.export``; a failure raises ``AotiExportError`` from torch's error.

    ``options`` are further keyword arguments of ``torch.export.export`` (``strict``,
    ``prefer_deferred_runtime_asserts_over_guards``, ...). A ``dynamic_shapes`` entry for a
    dim an input does not have raises ``AotiUsageError`` before exporting.
    """
    import torch

    from pytest_aoti.shapes import check_dynamic_shapes

    if dynamic_shapes is not None:
        check_dynamic_shapes(module, args, kwargs, dynamic_shapes)
    export_options: dict[str, Any] = {**(options or {}), "dynamic_shapes": dynamic_shapes}
    if strict is not None:
        export_options["strict"] = strict
    # imported here: guards reads this module's source frames
    from pytest_aoti.compiling.guards import guard_sources

    try:
        with quiet_torch_deprecations():
            return torch.export.export(module, tuple(args), dict(kwargs), **export_options)
    except Exception as error:  # torch raises many unrelated types here
        headline, details, hint = _export_advice(error, module, args, kwargs, dynamic_shapes)
        details = [*details, *guard_sources(error, module, args, kwargs, export_options)]
        # torch 2.13 exports non-strict by default
        in_strict = bool(export_options.get("strict", False))
        hint = library_type_hint(str(error)) or for_mode(hint, in_strict)
        message = summarize_torch_error(
            error, "torch.export.export", headline=headline, details=details, hint=hint
        )
        raise AotiExportError(message) from error


def decompose(exported: ExportedProgram) -> ExportedProgram:
    """``run_decompositions()``: functionalizes in-place ops into mutation outputs."""
    try:
        with quiet_torch_deprecations():
            decomposed: ExportedProgram = exported.run_decompositions()
            return decomposed
    except Exception as error:
        text = str(error)
        if _is_data_dependent(error):
            hint = _DATA_DEPENDENT_HINT
        elif re.search(r"Cannot view a tensor|view size is not compatible", text):
            hint = _VIEW_HINT
        else:
            hint = _DECOMPOSE_HINT
        message = summarize_torch_error(error, "run_decompositions", hint=hint)
        raise AotiExportError(message, stage="decompose") from error


def compile_package(
    decomposed: ExportedProgram,
    package_path: Path,
    inductor_configs: Mapping[str, Any] | None,
) -> Path:
    """AOT-compile ``decomposed`` into a ``.pt2`` package at ``package_path``."""
    import torch._inductor

    check_constant_outputs(decomposed)
    package_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with quiet_torch_deprecations():
            written = torch._inductor.aoti_compile_and_package(
                decomposed,
                package_path=str(package_path),
                inductor_configs=dict(inductor_configs or {}),
            )
    except Exception as error:
        text = str(error)
        no_compiler = "InvalidCxxCompiler" in text or "No working C++ compiler" in text
        hint = _COMPILER_HINT if no_compiler else _COMPILE_HINT
        message = summarize_torch_error(error, "AOTI compile", hint=hint)
        raise AotiCompileError(message) from error
    return Path(written)


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
        message = summarize_torch_error(error, f"loading the AOTI package {package_path}")
        raise AotiCompileError(message) from error


def check_constant_outputs(program: ExportedProgram) -> None:
    """Raise ``AotiCompileError`` for a user output that is a Python constant the AOTI
    compiler cannot return.

    ``return x + 1, 0.5`` exports with the float as a constant output, and Inductor then
    stops with an opaque ``AssertionError: [TensorBox(StorageBox(...`` (torch 2.13). None,
    bool and int constants compile (the engine returns ints and bools as 0-dim tensors).
    """
    import torch.utils._pytree as pytree
    from torch.export.graph_signature import ConstantArgument, OutputKind

    outputs = [
        spec.arg
        for spec in program.graph_signature.output_specs
        if spec.kind == OutputKind.USER_OUTPUT
    ]
    out_spec = program.call_spec.out_spec
    if out_spec is not None and out_spec.num_leaves == len(outputs):
        numbered = pytree.tree_unflatten(list(range(len(outputs))), out_spec)
        paths = [
            "output" + pytree.keystr(path) for path, _ in pytree.tree_flatten_with_path(numbered)[0]
        ]
    else:
        paths = [f"output {index}" for index in range(len(outputs))]
    for location, arg in zip(paths, outputs):
        if not isinstance(arg, ConstantArgument):
            continue
        value = arg.value
        if value is None or isinstance(value, int):  # bool is an int
            continue
        as_tensor = (
            f"return it as a tensor, e.g. torch.tensor({value!r}), or drop it from the outputs"
            if isinstance(value, float)
            else "drop it from the outputs, or return a tensor in its place"
        )
        raise AotiCompileError(
            f"AOTI compile failed: {location} is the Python {type(value).__name__} "
            f"{value!r}, a constant the AOTI engine cannot return\n"
            "  Inductor stops on it with an opaque AssertionError; tensors, None, int and "
            "bool outputs compile\n"
            f"  What to try: {as_tensor}"
        )


# --------------------------------------------------------------------------- advice


def _export_advice(
    error: BaseException,
    module: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    dynamic_shapes: Any,
) -> tuple[str | None, list[str], str]:
    """The headline (when better than torch's first line), detail lines and the hint that
    fit why export failed."""
    from pytest_aoti.shapes import sizes_export_specializes, sizes_outside_spec

    text = str(error)
    if _is_data_dependent(error):
        return None, [], _DATA_DEPENDENT_HINT
    if "not in range" in text and dynamic_shapes is not None:
        outside = sizes_outside_spec(module, args, kwargs, dynamic_shapes)
        if outside:
            return (
                outside[0],
                [f"  {line}" for line in outside[1:]],
                "What to try: pass an example whose sizes lie inside the declared ranges, "
                "or widen the Dim's min/max.",
            )
    fixes = _suggested_fixes(text)
    if fixes or re.search(r"Constraints violated|specialized", text):
        small = []
        if dynamic_shapes is not None:
            small = sizes_export_specializes(module, args, kwargs, dynamic_shapes)
        return None, [], _constraint_hint(fixes, small)
    return None, [], _EXPORT_HINT


def _is_data_dependent(error: BaseException) -> bool:
    names = {type(error).__name__, type(error.__cause__).__name__}
    if "GuardOnDataDependentSymNode" in names:
        return True
    return bool(
        re.search(
            r"data-dependent|Could not guard on data-dependent expression|"
            r"Data-dependent branching",
            str(error),
            re.IGNORECASE,
        )
    )


def _suggested_fixes(text: str) -> list[str]:
    """torch's ``Suggested fixes:`` lines, e.g. ``b = 4`` or ``c = b``."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line.strip().rstrip(":") in ("Suggested fixes", "Suggested fix"):
            fixes = []
            for fix in lines[index + 1 :]:
                if not fix.startswith((" ", "\t")) or not fix.strip():
                    break
                fixes.append(fix.strip())
            return fixes
    return []


def _constraint_hint(fixes: list[str], small: list[str]) -> str:
    """The suggested fixes, repeated, with what each kind means for ``dynamic_shapes``."""
    if small:
        quoted = "; ".join(f"`{fix}`" for fix in fixes)
        because = f" (torch's suggested {quoted} follows from that example)" if fixes else ""
        return "What to try: " + ". ".join(small) + because + "."
    sentences = []
    if fixes:
        plural = "es" if len(fixes) > 1 else ""
        sentences.append(
            f"apply torch's suggested fix{plural} to dynamic_shapes: "
            + "; ".join(f"`{fix}`" for fix in fixes)
        )
        if any(re.fullmatch(r"\w+ = -?\d+", fix) for fix in fixes):
            sentences.append(
                "A fix `name = <int>` means the model needs that size: declare the dim "
                "Dim.STATIC (or leave it out of dynamic_shapes), or change the model"
            )
        if any(re.fullmatch(r"\w+ = .*[A-Za-z_].*", fix) for fix in fixes):
            sentences.append(
                "A fix `c = b` (or `c = 2*b`) ties two dims: use one Dim for both (or the "
                "derived dim it gives)"
            )
    else:
        sentences.append(
            "the model fixes a dim declared dynamic: use Dim.STATIC or Dim.AUTO for it"
        )
    return "What to try: " + ". ".join(sentences) + "."


# --------------------------------------------------------------------------- summarizing

_FILE_LINE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>[^\s,]+)')
_TORCH_PACKAGES = ("torch", "functorch", "torchgen", "sympy", "mpmath", "triton")
_TORCH_PATH = re.compile(r"[/\\](site|dist)-packages[/\\](" + "|".join(_TORCH_PACKAGES) + r")[/\\]")
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # pytest_aoti/
_REASON_LINE = re.compile(
    r"^\s*(Explanation|Hint|Suggested fix)\b:?|:\d+(:\d+)?: (fatal )?error:|^\s*error:",
    re.IGNORECASE,
)
# torch's logging and debugging boilerplate, dropped from the reason
_NOISE = re.compile(
    r"^\s*(For more information, run with TORCH_LOGS|For extended logs when we create"
    r"|If you suspect the guard was triggered from C\+\+|For more debugging help, see"
    r"|For C\+\+ stack trace, run with|Set TORCHDYNAMO_VERBOSE=1|Use tlparse to see"
    r"|Developer debug context:|The error above occurred when calling torch\.export)"
)
# where torch lists source frames; the innermost is shown on its own "at" line
_FRAME_BLOCK = re.compile(
    r"^\s*(Original traceback:|The following call raised this error:|from user code:)\s*$"
)


@dataclass(frozen=True)
class SourceFrame:
    """A source line outside torch: the model's own, or its library's."""

    file: str
    line: int
    function: str
    text: str
    """The line's source text (via ``linecache``), stripped; empty when unreadable."""
    callers: tuple[str, ...] = ()
    """``file:line in function`` of the frames outside torch that led to it, innermost
    first."""

    def describe(self, indent: str = "  ") -> list[str]:
        lines = [f"{indent}at {self.file}:{self.line} in {self.function}"]
        if self.text:
            lines.append(f"{indent}    {self.text}")
        if self.callers:
            more = ", ..." if len(self.callers) > 3 else ""
            lines.append(f"{indent}called from {', '.join(self.callers[:3])}{more}")
        return lines


def source_frame(error: BaseException) -> SourceFrame | None:
    """The innermost frame outside torch and pytest-aoti where ``error`` arose.

    Taken from the exception's traceback when it passes through the model (non-strict
    export runs the forward in Python), else from the frames torch quotes in its message
    ("Original traceback" of run_decompositions, "from user code" of strict export, "The
    following call raised this error"): innermost, not outermost, so that a failing
    ``.view`` inside a library layer names that line rather than the model's forward.
    """
    found = [(file, line, func) for file, line, func, _ in _traceback_frames(error)]
    if not found:
        found = _text_frames(str(error))
    if not found:
        return None
    *outer, (file, line, function) = found
    callers = tuple(f"{os.path.basename(f)}:{n} in {name}" for f, n, name in reversed(outer))
    return SourceFrame(file, line, function, linecache.getline(file, line).strip(), callers)


def _traceback_frames(error: BaseException) -> list[tuple[str, int, str, types.TracebackType]]:
    frames = []
    tb = error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if not _is_library(code.co_filename):
            frames.append((code.co_filename, tb.tb_lineno, code.co_name, tb))
        tb = tb.tb_next
    return frames


def _text_frames(text: str) -> list[tuple[str, int, str]]:
    frames = []
    for line in text.splitlines():
        match = _FILE_LINE.match(line)
        if match and not _is_library(match["file"]):
            frames.append((match["file"], int(match["line"]), match["func"]))
    return frames


def _is_library(file: str) -> bool:
    """Whether ``file`` belongs to torch, its own dependencies, pytest-aoti or Python."""
    if file.startswith("<") or _TORCH_PATH.search(file):
        return True
    path = os.path.abspath(file)
    if path.startswith(_PACKAGE_DIR + os.sep):
        return True
    for name in _TORCH_PACKAGES:
        module = sys.modules.get(name)
        location = getattr(module, "__file__", None)
        if location and path.startswith(os.path.dirname(os.path.abspath(location)) + os.sep):
            return True
    stdlib = sysconfig.get_paths()["stdlib"]
    return path.startswith(stdlib + os.sep) and "site-packages" not in path


def pin_to_source(error: BaseException) -> None:
    """Cut the tracebacks of ``error`` and the exceptions chained to it down to the source
    frame outside torch (or to nothing where there is none).

    What pytest then prints for a chained torch error is its type and whole message at
    the model's line, instead of dozens of torch's internal frames, each shown with its
    source.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        frames = _traceback_frames(current)
        if frames:
            tb = frames[-1][3]
            current.__traceback__ = types.TracebackType(
                None, tb.tb_frame, tb.tb_lasti, tb.tb_lineno
            )
        else:
            current.__traceback__ = None
        if current.__cause__ is not None:
            current = current.__cause__
        elif not current.__suppress_context__:
            current = current.__context__
        else:
            current = None


def torch_reason(error: BaseException, max_lines: int = 30) -> list[str]:
    """torch's message without its logging boilerplate, quoted frames and blank lines.

    Kept: the reason, constraint-violation details, suggested fixes, explanations and
    hints, links to torch's docs. Beyond ``max_lines``, only lines that state an error
    or a hint are kept, and a last line says how many were left out.
    """
    text = str(error).strip() or type(error).__name__
    kept: list[str] = []
    in_frames = False
    for line in text.splitlines():
        if _FRAME_BLOCK.match(line):
            in_frames = True
            continue
        if in_frames:
            if _FILE_LINE.match(line) or line.startswith((" ", "\t")):
                continue
            in_frames = False
        if not line.strip() or _NOISE.match(line):
            continue
        kept.append(line.rstrip())
    if len(kept) <= max_lines:
        return kept
    head = kept[: max_lines - 5]
    tail = [line for line in kept[max_lines - 5 :] if _REASON_LINE.search(line)][:5]
    left_out = len(kept) - len(head) - len(tail)
    return [
        *head,
        *tail,
        f"... {left_out} more lines of torch's error (chained as __cause__)",
    ]


def summarize_torch_error(
    error: BaseException,
    stage: str,
    *,
    headline: str | None = None,
    details: list[str] | None = None,
    hint: str | None = None,
) -> str:
    """``{stage} failed: {reason}`` and below it: the source line, torch's whole reason
    and the hint.

    The first line is ``headline`` when given (what pytest-aoti worked out, e.g. which
    input is out of range), else torch's first line.
    """
    reason = torch_reason(error)
    first = headline if headline is not None else reason.pop(0).strip()
    lines = [f"{stage} failed: {first}", *(details or [])]
    frame = source_frame(error)
    if frame is not None:
        lines += frame.describe()
    if reason:
        if headline is not None:
            lines.append(f"  torch: {reason.pop(0).strip()}")
        lines += [f"  {line}" for line in reason]
    if hint:
        lines.append(f"  {hint}")
    return "\n".join(lines)


def unknown_inductor_options(configs: Mapping[str, Any]) -> str:
    """A sentence naming the keys of ``configs`` that Inductor does not know, each with the
    closest valid keys; empty when every key is known."""
    import difflib

    import torch._inductor

    known = set(torch._inductor.list_options())
    problems = []
    for name in sorted(set(configs) - known):
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        problems.append(f"unknown inductor option {name!r}{hint}")
    return "; ".join(problems)
