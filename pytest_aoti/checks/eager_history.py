"""Eager's calls on one input set, recorded before the engine runs: outputs, named inputs and
mutated buffers after each call, and the Python attributes it changed. Eager may change only what
the program records as mutated, and never a Parameter."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_aoti.checks.module_guard import (
    AttributeChange,
    FirstState,
    ModuleCopies,
    assert_weights_unwritten,
    changes_between,
    plain_attributes,
    weight_versions,
)
from pytest_aoti.checks.side_by_side import eager_module
from pytest_aoti.errors import AotiCheckError
from pytest_aoti.findings import Finding, FindingKind
from pytest_aoti.trees import clone_tree

if TYPE_CHECKING:
    import torch

    from pytest_aoti.compiling.program import AotiProgram


def record_eager(
    program: AotiProgram,
    module: torch.nn.Module,
    calls: int,
    *,
    context: Callable[[int, int], str],
    label: str,
    copies: ModuleCopies | None,
    named_inputs: Mapping[str, Any],
    cloned: tuple[tuple[tuple[Any, ...], dict[str, Any]], Mapping[str, Any]],
) -> list[EagerCall]:
    """``calls`` eager calls on ``cloned`` (a clone of the input set, and its inputs by
    user-input name; ``named_inputs``: the input set's), recorded; raises :class:`EagerRaised`
    where the module raises, and the finding of an unrecorded write (``context(call, calls)``
    says where). ``copies``: the search's copies of ``module`` (else a copy of its own)."""
    __tracebackhide__ = True
    import torch

    start = copies.eager() if copies is not None else FirstState(eager_module(module))
    eager = start.module
    versions = weight_versions(eager)
    (args, kwargs), named = cloned
    # what eager may not change, as it was before the first call (the buffers' values, the
    # inputs as given: the calls run on clones of them): a change fails at once, so it is
    # what a later call starts from too
    buffers_before = (
        start.buffers
        if start.buffers is not None
        else {name: buffer.detach().clone() for name, buffer in eager.named_buffers()}
    )
    inputs_before = {
        name: leaf
        for name, leaf in named_inputs.items()
        if isinstance(leaf, torch.Tensor) and name not in program.mutated_inputs
    }
    buffers = sorted(program.mutated_buffers)
    attributes = start.attributes if start.attributes is not None else plain_attributes(eager)
    history: list[EagerCall] = []
    for call in range(1, calls + 1):
        try:
            with torch.no_grad():
                outputs = clone_tree(eager(*args, **kwargs))
        except Exception as error:  # the module's own error: the caller decides
            raise EagerRaised(error) from error
        assert_weights_unwritten(eager, versions)
        try:
            _assert_recorded(
                program, eager, buffers_before, inputs_before, named, context(call, calls)
            )
        except AotiCheckError as error:
            finding = error.finding.with_call(call, calls, label, error.finding.context)
            raise error.amended(finding) from None
        live = dict(eager.named_buffers())
        # a later call writes the inputs again: earlier calls keep a copy
        after = named if call == calls else clone_tree(named)
        now = plain_attributes(eager)
        history.append(
            EagerCall(
                outputs,
                after,
                {name: live[name].detach().clone() for name in buffers},
                tuple(changes_between(attributes, now)),
            )
        )
        attributes = now
    return history


@dataclass(frozen=True)
class EagerCall:
    """One eager call of an input set: what the engine's call is compared with."""

    outputs: Any
    inputs: Mapping[str, Any]
    """Every named user input after the call."""
    buffers: Mapping[str, Any]
    """The registered buffers the program mutates, after the call."""
    attributes: tuple[AttributeChange, ...] = ()
    """The Python attributes the call changed."""


class EagerRaised(Exception):
    """The module itself raised on an input set (``__cause__``): nothing to compare."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(f"{type(error).__name__}: {str(error).strip()[:300]}")
        self.error = error


def _assert_recorded(
    program: AotiProgram,
    module: torch.nn.Module,
    buffers: Mapping[str, torch.Tensor],
    inputs: Mapping[str, Any],
    after: Mapping[str, Any],
    context: str,
) -> None:
    """Raise the finding of a buffer of ``module`` or an input (``after``: eager's, by name)
    that eager changed since ``buffers`` and ``inputs`` although the program does not record
    it as mutated."""
    __tracebackhide__ = True
    changed = sorted(
        name
        for name, buffer in module.named_buffers()
        if name not in program.mutated_buffers
        and (name not in buffers or _changed(buffers[name], buffer))
    )
    if changed:
        raise AotiCheckError(_unrecorded_buffers(changed, program, context))
    for name, before in inputs.items():
        if _changed(before, after[name]):
            raise AotiCheckError(_unrecorded_input(name, context))


def _changed(before: torch.Tensor, after: torch.Tensor) -> bool:
    """Whether a call changed a tensor (NaN left as NaN is no change)."""
    import torch

    if before.shape != after.shape or before.dtype != after.dtype:
        return True
    if before.is_floating_point() or before.is_complex():
        return not bool(((before == after) | (before.isnan() & after.isnan())).all())
    return not torch.equal(before, after)


def _unrecorded_buffers(names: list[str], program: AotiProgram, context: str) -> Finding:
    listed = ", ".join(repr(name) for name in names)
    recorded = ", ".join(repr(name) for name in sorted(program.mutated_buffers)) or "none"
    plural = len(names) > 1
    return Finding(
        kind=FindingKind.BUFFER,
        location=f"buffer{'s' if plural else ''} {listed}",
        phrase="changed in eager but not recorded as mutated by the program",
        summary="the engine keeps the exported value, so every later call is wrong",
        context=context,
        details=(
            f"buffers the program records as mutated: {recorded}",
            "strict export drops a reassigned buffer attribute (self.buf = self.buf + 1): "
            "export with strict=False, or update the buffer in place (self.buf.add_(1)), "
            "to record it",
        ),
        stage="export",
        extra={"buffers": names},
    )


def _unrecorded_input(name: str, context: str) -> Finding:
    return Finding(
        kind=FindingKind.MUTATED_INPUT,
        location=f"input '{name}'",
        phrase="was written by eager but the program does not record it as mutated",
        summary="export lost the write, so the engine leaves the caller's tensor unchanged",
        context=context,
        details=(
            "a write that export does not see (e.g. behind torch.compiler.is_exporting(), "
            "or through .data) is not in the program; make it an ordinary in-place op",
        ),
        stage="export",
    )
