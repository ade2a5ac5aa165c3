"""torch's errors explained, in one shape: ``{step} failed: {reason}``, then the innermost source
line outside torch, the rest of torch's reason without its logging boilerplate, and a hint."""

from __future__ import annotations

import linecache
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_aoti.compiling.tree_types import named_registration_call, serialization_hint
from pytest_aoti.frames import FILE_LINE, quoted_frames, user_traceback

if TYPE_CHECKING:
    import torch

EXPORT_HINT = (
    "What to try: strict=False (or strict=True), a dynamic_shapes spec that matches the "
    "model, or torch.export.draft_export(module, args) to list every problem at once."
)
DATA_DEPENDENT_HINT = (
    "What to try: the model branches on (or sizes by) a tensor's values, which export "
    "cannot trace. Write the branch as torch.cond(pred, true_fn, false_fn, operands), or "
    "compute both sides and pick with torch.where; where the value only decides a size or "
    "an assert, export with strict=False and state the fact with torch._check(...). "
    "torch.export.draft_export(module, args) lists every such place at once."
)
DECOMPOSE_HINT = (
    "What to try: the module exported, so this is torch's decomposition of the program: "
    "strict=True (or strict=False) traces it differently; "
    "torch.export.export(module, args).run_decompositions() reproduces it for a PyTorch "
    "bug report."
)
VIEW_HINT = (
    "What to try: the decomposed program lays this tensor out differently from eager, so "
    ".view() cannot reinterpret it: use .reshape() (or .contiguous().view()) at the line "
    "above; in a library model, choose another implementation of the layer (for Hugging "
    'Face models, attn_implementation="eager" instead of "sdpa").'
)
COMPILE_HINT = (
    "What to try: the program exported and decomposed, so Inductor failed on it: other "
    "inductor_configs (without custom passes), or report it to PyTorch with the program "
    "saved by torch.export.save(torch.export.export(module, args), 'repro.pt2')."
)
COMPILER_HINT = (
    "What to try: install a C++ compiler (g++), or name a working one with "
    "inductor_configs={'cpp.cxx': (None, 'g++')}."
)
_RANGE_HINT = (
    "What to try: pass an example whose sizes lie inside the declared ranges, "
    "or widen the Dim's min/max."
)


def export_failure(
    error: BaseException,
    module: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    dynamic_shapes: Any,
    *,
    strict: bool = False,
    guard_lines: Sequence[str] = (),
) -> str:
    """The message of a failed ``torch.export.export``. ``strict``: the mode that failed (the
    hint never suggests it); ``guard_lines``: where a constraint violation's guards came from."""
    headline, details, hint = _export_advice(error, module, args, kwargs, dynamic_shapes)
    hint = library_type_hint(str(error)) or for_mode(hint, strict)
    return summarize_torch_error(
        error, "torch.export.export", headline=headline, details=[*details, *guard_lines], hint=hint
    )


def decompose_failure(error: BaseException) -> str:
    """The message of a failed ``run_decompositions()``."""
    if is_data_dependent(error):
        hint = DATA_DEPENDENT_HINT
    elif re.search(r"Cannot view a tensor|view size is not compatible", str(error)):
        hint = VIEW_HINT
    else:
        hint = DECOMPOSE_HINT
    return summarize_torch_error(error, "run_decompositions", hint=hint)


def compile_failure(error: BaseException) -> str:
    """The message of a failed ``aoti_compile_and_package``."""
    text = str(error)
    if "InvalidCxxCompiler" in text or "No working C++ compiler" in text:
        hint = COMPILER_HINT
    else:
        hint = serialization_hint(text) or COMPILE_HINT
    return summarize_torch_error(error, "AOTI compile", hint=hint)


def load_failure(error: BaseException, package_path: Path) -> str:
    """The message of a failed ``aoti_load_package``."""
    return summarize_torch_error(error, f"loading the AOTI package {package_path}")


def _export_advice(
    error: BaseException,
    module: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    dynamic_shapes: Any,
) -> tuple[str | None, list[str], str]:
    """The headline (if better than torch's), detail lines and hint for why export failed."""
    # shapes/ imports torch
    from pytest_aoti.shapes.user_spec import sizes_export_specializes, sizes_outside_spec

    text = str(error)
    if is_data_dependent(error):
        return None, [], DATA_DEPENDENT_HINT
    if "not in range" in text and dynamic_shapes is not None:
        outside = sizes_outside_spec(module, args, kwargs, dynamic_shapes)
        if outside:
            return outside[0], [f"  {line}" for line in outside[1:]], _RANGE_HINT
    fixes = suggested_fixes(text)
    if fixes or re.search(r"Constraints violated|specialized", text):
        small = []
        if dynamic_shapes is not None:
            small = sizes_export_specializes(module, args, kwargs, dynamic_shapes)
        return None, [], constraint_hint(fixes, small)
    return None, [], EXPORT_HINT


def is_data_dependent(error: BaseException) -> bool:
    """Whether torch failed on a branch or size decided by a tensor's values."""
    if "GuardOnDataDependentSymNode" in {type(error).__name__, type(error.__cause__).__name__}:
        return True
    return bool(
        re.search(
            r"data-dependent|Could not guard on data-dependent expression|"
            r"Data-dependent branching",
            str(error),
            re.IGNORECASE,
        )
    )


def suggested_fixes(text: str) -> list[str]:
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


def constraint_hint(fixes: list[str], small: list[str]) -> str:
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


# what torch leaves out: a library type export cannot flatten, and the export mode that failed
_UNKNOWN_TYPE = re.compile(
    r"Found <class '(?P<cls>[\w.<>]+)'> in (?P<where>\w+), which is not a known type"
    r"|Unsupported (?P<input>input) type <class '(?P<input_cls>[\w.<>]+)'>"
)


def library_type_hint(text: str) -> str | None:
    """The hint for an input or output type torch.export cannot flatten; None for other errors."""
    match = _UNKNOWN_TYPE.search(text)
    if match is None:
        return None
    path = match["cls"] or match["input_cls"]
    where = match["where"] or match["input"]
    name = path.rsplit(".", 1)[-1]
    if path.startswith("transformers.") and name.endswith("Cache"):
        return (
            f"What to try: {name} is transformers' key/value cache, which torch.export cannot "
            f"flatten: call the model with use_cache=False (the cache only serves generation), "
            "or register the cache for export before exporting: "
            "transformers.integrations.executorch.register_dynamic_cache_export_support() "
            "for DynamicCache, "
            "transformers.exporters.exporter_dynamo.register_cache_pytrees_for_model(model) "
            "for every cache class of the model."
        )
    return (
        f"What to try: {path} in the {where} is not a pytree type: register it before "
        f"exporting, with the serialized name the AOTI package needs: "
        f"{named_registration_call(path)}; or pass and return plain tensors, tuples, lists "
        "and dicts."
    )


def for_mode(hint: str, strict: bool) -> str:
    """``hint`` without advice to switch to the export mode already in use."""
    other = "strict=False" if strict else "strict=True"
    hint = hint.replace("strict=False (or strict=True)", other)
    hint = hint.replace("strict=True (or strict=False)", other)
    return hint if strict else hint.replace("export with strict=False and state", "state")


_REASON_LINE = re.compile(
    r"^\s*(Explanation|Hint|Suggested fix)\b:?|:\d+(:\d+)?: (fatal )?error:|^\s*error:",
    re.IGNORECASE,
)
# torch's logging and debugging boilerplate, dropped from the reason
_NOISE = re.compile(
    r"^\s*(For more information, run with TORCH_LOGS|For extended logs when we create"
    r"|If you suspect the guard was triggered from C\+\+|For more debugging help, see"
    r"|For C\+\+ stack trace, run with|Set TORCHDYNAMO_VERBOSE=1|Use tlparse to see"
    r"|Developer debug context:|The error above occurred when calling torch\.export"
    # where inside torch the guard was raised: the user's line is shown instead
    r"|Caused by: \(_?[\w/]+\.py:\d+ in \w+\)$)"
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
    """``file:line in function`` of the frames outside torch that led to it, innermost first."""

    def describe(self, indent: str = "  ") -> list[str]:
        """``at file:line in function``, the source line and the callers, indented."""
        lines = [f"{indent}at {self.file}:{self.line} in {self.function}"]
        if self.text:
            lines.append(f"{indent}    {self.text}")
        if self.callers:
            more = ", ..." if len(self.callers) > 3 else ""
            lines.append(f"{indent}called from {', '.join(self.callers[:3])}{more}")
        return lines


def source_frame(error: BaseException) -> SourceFrame | None:
    """The innermost frame outside torch and pytest-aoti where ``error`` arose: from its
    traceback, else from the frames torch quotes in its message. Innermost, so a failing
    ``.view`` in a library layer names that line, not the model's forward."""
    found = [
        (tb.tb_frame.f_code.co_filename, tb.tb_lineno, tb.tb_frame.f_code.co_name)
        for tb in user_traceback(error)
    ]
    if not found:
        found = quoted_frames(str(error))
    if not found:
        return None
    *outer, (file, line, function) = found
    callers = tuple(f"{os.path.basename(f)}:{n} in {name}" for f, n, name in reversed(outer))
    return SourceFrame(file, line, function, linecache.getline(file, line).strip(), callers)


def torch_reason(error: BaseException, max_lines: int = 30) -> list[str]:
    """torch's message without logging boilerplate, quoted frames and blank lines. Beyond
    ``max_lines`` only error and hint lines are kept, and a last line counts the rest."""
    text = str(error).strip() or type(error).__name__
    kept: list[str] = []
    in_frames = False
    for line in text.splitlines():
        if _FRAME_BLOCK.match(line):
            in_frames = True
            continue
        if in_frames:
            if FILE_LINE.match(line) or line.startswith((" ", "\t")):
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
    return [*head, *tail, f"... {left_out} more lines of torch's error (chained as __cause__)"]


def summarize_torch_error(
    error: BaseException,
    stage: str,
    *,
    headline: str | None = None,
    details: list[str] | None = None,
    hint: str | None = None,
) -> str:
    """``{stage} failed: {reason}`` (or ``headline``), the source line, torch's reason, the hint."""
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
