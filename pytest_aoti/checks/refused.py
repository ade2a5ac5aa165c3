"""Input sets inside the declared ranges that the exported program's runtime assertions
(``aten._assert_scalar``) refuse: the exported program runs a generated or boundary set before the
engine; a refusal is a stage ``"export"`` finding (a data-dependent one after other value draws)."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from pytest_aoti.compiling.pipeline import quiet_torch_deprecations
from pytest_aoti.trees import clone_tree

if TYPE_CHECKING:
    from torch.export import ExportedProgram

VALUE_DRAWS = 8
"""Value draws tried on one shape before a value-dependent assertion counts as refusing it."""

_UNBACKED = re.compile(r"\bu\d+\b")
_BACKED = re.compile(r"\bs\d+\b")


class Refusal(Exception):
    """The exported program refused an input set; the message is torch's first line."""

    def __init__(self, assertion: str, *, value_dependent: bool, error: str) -> None:
        super().__init__(assertion)
        self.assertion = assertion
        self.value_dependent = value_dependent
        self.error = error
        """torch's exception class name."""

    def lines(self) -> tuple[list[str], list[str]]:
        """``(details, notes)`` of a refusal's finding."""
        details = [
            f"the exported program (exported.module(), no compile) refuses it: {self.error}: "
            f"{self.assertion}"
        ]
        notes = []
        if self.value_dependent:
            details.append(
                "the assertion is on a data-dependent size (an unbacked symbol such as u0: a "
                "count of True values, nonzero()), so it depends on the input values: "
                f"{VALUE_DRAWS} draws of values for this shape were all refused"
            )
            notes.append(
                "the program accepts only some values at this shape: check chosen inputs with "
                "samples=[...] and examples=0, or make the model accept any such size"
            )
        else:
            notes.append(
                "torch.export inserted this runtime assertion while tracing: narrow the declared "
                "range (Dim min/max) to the shapes the model accepts, or make the model accept "
                "every shape in the range"
            )
        return details, notes


def has_runtime_asserts(exported: ExportedProgram) -> bool:
    """Whether the program checks runtime assertions torch.export inserted."""
    import torch

    targets = {torch.ops.aten._assert_scalar.default, torch.ops.aten._assert_async.msg}
    return any(node.target in targets for node in exported.graph.nodes)


_Refusal = Refusal  # the type, where the class's attribute of that name would shadow it


class ExportedRefusals:
    """The exported program run uncompiled: which input sets it refuses (raising
    :attr:`Refusal`)."""

    Refusal: ClassVar[type[Refusal]] = Refusal

    @classmethod
    def where_it_refuses(cls, exported: ExportedProgram) -> ExportedRefusals | None:
        """The program's refusals, or None where it has no runtime assertion."""
        return cls(exported) if has_runtime_asserts(exported) else None

    def __init__(self, exported: ExportedProgram) -> None:
        with quiet_torch_deprecations():
            # module() shares the program's own buffers: a copy leaves them as exported
            self._module = copy.deepcopy(exported.module())

    def refusal(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Refusal | None:
        """The exported program's refusal of this input set, or None when it runs it."""
        import torch

        call_args, call_kwargs = clone_tree((args, kwargs))
        try:
            with torch.no_grad():
                self._module(*call_args, **call_kwargs)
        except Exception as error:  # any error of the uncompiled program is a refusal
            text = str(error).strip().splitlines()
            first = text[0] if text else type(error).__name__
            value_dependent = bool(_UNBACKED.search(first)) and not _BACKED.search(first)
            return Refusal(first, value_dependent=value_dependent, error=type(error).__name__)
        return None

    def accepted_seed(
        self, build: Callable[[int], tuple[tuple[Any, ...], dict[str, Any]]], seed: int
    ) -> int:
        """``seed``, or a seed accepted after a value-dependent refusal; else raises it."""
        refusal = self.refusal(*build(seed))
        if refusal is None:
            return seed
        if refusal.value_dependent:
            for draw in range(1, VALUE_DRAWS):
                other = (seed + draw * 7919) % 2**32
                if self.refusal(*build(other)) is None:
                    return other
        raise refusal
