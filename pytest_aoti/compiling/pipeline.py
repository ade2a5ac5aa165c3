"""The torch calls that turn a module into a loaded AOTInductor engine, one function a step:
export → run_decompositions → aoti_compile_and_package → aoti_load_package. A failing step
raises an error with its stage and :mod:`~pytest_aoti.compiling.explain`'s message."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_aoti.compiling.explain import (
    compile_failure,
    decompose_failure,
    export_failure,
    is_data_dependent,
    load_failure,
    torch_reason,
)
from pytest_aoti.compiling.guards import guard_sources
from pytest_aoti.compiling.tree_types import check_program_classes
from pytest_aoti.errors import AotiCompileError, AotiExportError

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram


@contextlib.contextmanager
def quiet_torch_deprecations() -> Iterator[None]:
    """Hide torch's deprecation warnings (errors under ``filterwarnings = error``) and its
    structured trace log (it fills a failed test's "Captured log" with empty lines)."""
    logging.getLogger("torch.__trace").addFilter(_torch_trace_only)  # added once
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


@contextlib.contextmanager
def _export_noise_dropped() -> Iterator[None]:
    """Drop the partial graph and "Unable to find user code" from torch.export's stderr."""
    import io
    import sys

    shapes_log = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    shapes_log.addFilter(_not_unfound_user_code)
    written = io.StringIO()
    try:
        with contextlib.redirect_stderr(written):
            yield
    except Exception as error:
        graph = getattr(error, "partial_fx_graph", None)
        text = written.getvalue()
        if graph:
            text = text.replace(f"{graph}\n", "")
        sys.stderr.write(text)
        raise
    else:
        sys.stderr.write(written.getvalue())
    finally:
        shapes_log.removeFilter(_not_unfound_user_code)


def _not_unfound_user_code(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Unable to find user code corresponding")


def _torch_trace_only(record: logging.LogRecord) -> bool:
    return bool(os.environ.get("TORCH_TRACE"))


def export_module(
    module: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    dynamic_shapes: Any = None,
    options: Mapping[str, Any] | None = None,
) -> ExportedProgram:
    """``torch.export.export`` with ``options`` as further keywords; a failure raises
    ``AotiExportError``, a ``dynamic_shapes`` entry for a missing dim ``AotiUsageError``."""
    import torch

    from pytest_aoti.shapes.user_spec import check_dynamic_shapes

    if dynamic_shapes is not None:
        check_dynamic_shapes(module, args, kwargs, dynamic_shapes)
    export_options: dict[str, Any] = {**(options or {}), "dynamic_shapes": dynamic_shapes}
    try:
        with quiet_torch_deprecations(), _export_noise_dropped():
            exported = torch.export.export(module, tuple(args), dict(kwargs), **export_options)
    except Exception as error:  # torch raises many unrelated types here
        with quiet_torch_deprecations():
            guard_lines = guard_sources(error, module, args, kwargs, export_options)
        message = export_failure(
            error,
            module,
            args,
            kwargs,
            dynamic_shapes,
            # torch 2.13 exports non-strict by default
            strict=bool(export_options.get("strict", False)),
            guard_lines=guard_lines,
        )
        if is_data_dependent(error) and type(error).__str__ is BaseException.__str__:
            # pytest prints the chained error above ours: its first line at the model's line
            # is enough, the rest (torch's logging advice, the same line quoted) is above
            error.args = (torch_reason(error)[0],)
        raise AotiExportError(message, stage="export") from error
    # a custom class the compile could not store would fail one step later, and unexplained
    check_program_classes(exported.call_spec.in_spec, exported.call_spec.out_spec)
    return exported


def decompose(exported: ExportedProgram) -> ExportedProgram:
    """``run_decompositions()``: functionalizes in-place ops into mutation outputs."""
    try:
        with quiet_torch_deprecations():
            decomposed: ExportedProgram = exported.run_decompositions()
            return decomposed
    except Exception as error:
        raise AotiExportError(decompose_failure(error), stage="decompose") from error


def compile_package(
    decomposed: ExportedProgram, package_path: Path, inductor_configs: Mapping[str, Any] | None
) -> Path:
    """AOT-compile ``decomposed`` into a ``.pt2`` package at ``package_path``."""
    import torch._inductor

    check_constant_outputs(decomposed)
    package_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with quiet_torch_deprecations(), _old_objects_frozen():
            written = torch._inductor.aoti_compile_and_package(
                decomposed,
                package_path=str(package_path),
                inductor_configs=dict(inductor_configs or {}),
            )
    except KeyboardInterrupt:
        from pytest_aoti.compiling.compilers import end_compilers

        end_compilers()  # the compilers the driver started outlive its kill
        raise
    except Exception as error:
        raise AotiCompileError(compile_failure(error), stage="compile") from error
    return Path(written)


@contextlib.contextmanager
def _old_objects_frozen() -> Iterator[None]:
    """Inductor's compile runs full garbage collections, each walking every object alive
    before it (hundreds of thousands of torch's own: 0.2 s each on 2 cores); frozen for the
    compile, they walk only what the compile makes, and are thawed after, its garbage
    collected as before. A freeze of something else's is left alone."""
    if gc.get_freeze_count():
        yield
        return
    gc.collect(1)  # the young garbage goes now, not at the next full collection after
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def load_engine(package_path: Path, device: torch.device | None = None) -> Any:
    """Load a ``.pt2`` package into a callable engine (milliseconds once inductor is imported)."""
    import torch._inductor

    # the runner binds to the device index it was compiled for; loading on another index
    # of the same type is done by the package's own device_index argument
    options: dict[str, Any] = {}
    if device is not None and device.type == "cuda" and device.index is not None:
        options["device_index"] = device.index
    try:
        with quiet_torch_deprecations(), _isa_check_settled():
            return torch._inductor.aoti_load_package(str(package_path), **options)
    except Exception as error:
        raise AotiCompileError(load_failure(error, package_path), stage="compile") from error


def _isa_check_settled() -> contextlib.AbstractContextManager[object]:
    """Answer the package loader's ISA question from the machine's record: Inductor would
    build a C++ test program per candidate ISA (seconds per process) only to log a warning."""
    from pytest_aoti.compiling.machine import settled_target
    from pytest_aoti.compiling.vec_isa import answering_isa

    target = settled_target()
    return contextlib.nullcontext() if target is None else answering_isa(target.isa)


def check_constant_outputs(program: ExportedProgram) -> None:
    """Raise ``AotiCompileError`` for a constant output Inductor stops on with an opaque
    ``AssertionError`` (a float: ``return x + 1, 0.5``; a str, a dtype); None, bool and int
    compile (the engine returns an int or bool as a 0-dim tensor)."""
    from torch.export.graph_signature import ConstantArgument, OutputKind

    outputs = [
        spec.arg
        for spec in program.graph_signature.output_specs
        if spec.kind == OutputKind.USER_OUTPUT
    ]
    paths, parents = _output_paths(program.call_spec.out_spec, len(outputs))
    for location, parent, arg in zip(paths, parents, outputs):
        if not isinstance(arg, ConstantArgument):
            continue
        value = arg.value
        if value is None or isinstance(value, int):  # bool is an int
            continue
        raise AotiCompileError(
            f"AOTI compile failed: {location} is the Python {type(value).__name__} "
            f"{value!r}, a constant the AOTI engine cannot return\n"
            "  Inductor stops on it with an opaque AssertionError; tensors, None, int and "
            "bool outputs compile (the engine returns an int or bool as a 0-dim tensor)\n"
            f"  What to try: {_constant_fix(value, parent, location)}"
        )


def _output_paths(out_spec: Any, count: int) -> tuple[list[str], list[type | None]]:
    """Per user output, its path (``output.name``, ``output[1]``) and the class holding it."""
    import torch.utils._pytree as pytree

    from pytest_aoti.compiling.tree_types import leaf_parents

    plain = [f"output {index}" for index in range(count)]
    if out_spec is None or out_spec.num_leaves != count:
        return plain, [None] * count
    numbered = pytree.tree_unflatten(list(range(count)), out_spec)
    try:
        with_paths = pytree.tree_flatten_with_path(numbered)[0]
    except ValueError:  # a class registered without keys (refused at export)
        return plain, leaf_parents(out_spec)
    return ["output" + pytree.keystr(path) for path, _ in with_paths], leaf_parents(out_spec)


def _constant_fix(value: object, parent: type | None, location: str) -> str:
    """What to do with the constant output ``value`` at ``location``, held by a node of class
    ``parent``."""
    from pytest_aoti.compiling.tree_types import is_custom, serialized_name

    if isinstance(value, float):
        return f"return it as a tensor, e.g. torch.tensor({value!r}), or drop it from the outputs"
    if parent is not None and is_custom(parent):
        field = location.rpartition(".")[2] if "." in location else "field"
        return (
            f"where it is the same on every call, carry it in {parent.__qualname__}'s pytree "
            "context rather than as a leaf, and the engine returns the value exported: "
            f"torch.utils._pytree.register_pytree_node({parent.__qualname__}, flatten_fn, "
            f'unflatten_fn, serialized_type_name="{serialized_name(parent)}", '
            "flatten_with_keys_fn=flatten_with_keys_fn), whose flatten_fn returns the tensors "
            f"and obj.{field} as the context; else leave it out of the outputs"
        )
    return "drop it from the outputs, or return a tensor in its place"


def unknown_inductor_options(configs: Mapping[str, Any]) -> str:
    """A sentence naming the keys Inductor does not know, with close ones; empty if none."""
    import difflib

    import torch._inductor

    known = set(torch._inductor.list_options())
    problems = []
    for name in sorted(set(configs) - known):
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        problems.append(f"unknown inductor option {name!r}{hint}")
    return "; ".join(problems)
