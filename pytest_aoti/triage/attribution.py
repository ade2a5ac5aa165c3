"""Which stage introduced a difference, and the input set to replay it on.

When a parity run fails, the same inputs run again through the exported program and the
decomposed program (plain ATen, no compile): the first of them that differs from eager is
the stage at fault; when both match, the AOTI compile is, and the localizer names the
first diverging node. The tester hands an :class:`Attribution` to the checks (as their
:class:`~pytest_aoti.checks.base.Triage`), so the checks never import triage.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from pytest_aoti.api import AotiProgram, FindingKind, InputReplay
from pytest_aoti.triage.localize import localize

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram

    from pytest_aoti.api import (
        AotiCheckError,
        AotiProgram,
        CheckContext,
        Finding,
        InputSet,
        ProgramRegistry,
        Tolerance,
    )


class Localizer(Protocol):
    """Names the first diverging node for failing inputs (see :mod:`pytest_aoti.triage.localize`)."""

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any], calls: int) -> Any: ...


class Attribution:
    """Explains the failed input sets of one check: stage, node, replay."""

    def __init__(self, localizer: Localizer | None = None) -> None:
        self._localizer = localizer

    def explain(
        self, error: AotiCheckError, run: CheckContext.ComparedRun, calls: int, *, attribute: bool
    ) -> AotiCheckError:
        """``error`` with the replay of ``run``'s inputs and, with ``attribute``, the stage
        and node (a search that runs many failing shapes attributes only the last)."""
        finding = self.attributed(error.finding, run, calls) if attribute else error.finding
        return self.replayed(error.amended(finding), run.module, run.fresh_inputs(), calls)

    def replayed(
        self, error: AotiCheckError, module: torch.nn.Module, inputs: InputSet, calls: int
    ) -> AotiCheckError:
        """``error`` with the replay of ``inputs`` on ``module`` (a new error: the one given
        is left as it is)."""
        amended = error.amended(error.finding)
        args, kwargs = inputs
        amended.replay = InputReplay(module, tuple(args), dict(kwargs), calls)
        return amended

    def attributed(self, finding: Finding, run: CheckContext.ComparedRun, calls: int) -> Finding:
        """``finding`` with the stage that introduced the difference, and its node."""
        # a "buffer" finding that comes here is a parity finding named after its buffers
        kind = FindingKind(finding.kind)
        if finding.stage is not None or not (kind.is_parity or kind == FindingKind.BUFFER):
            return finding
        program = run.program
        try:
            if _replay_differs(run, program.exported, calls):
                return replace(finding, stage="export")
            if _replay_differs(run, program.decomposed, calls):
                return replace(finding, stage="decompose")
        except Exception as error:  # attribution is a bonus: never mask the failure
            reason = f"replaying the uncompiled programs raised {type(error).__name__}: {error}"
            return replace(finding, stage_reason=reason.splitlines()[0])
        finding = replace(finding, stage="compile")
        if self._localizer is None:
            return finding
        args, kwargs = run.fresh_inputs()
        try:
            localization = self._localizer(args, kwargs, calls)
        except Exception as error:  # like the stage: a bonus that never masks the failure
            reason = f"localizing raised {type(error).__name__}: {error}".splitlines()[0]
            return replace(finding, node_reason=reason)
        node = localization.node
        if node is not None and finding.kind == FindingKind.OUTPUT:
            node = node.as_measured(finding.figures)  # one tensor, one set of figures
        return replace(finding, node=node, node_reason=localization.reason)


def _replay_differs(run: CheckContext.ComparedRun, program: ExportedProgram, calls: int) -> bool:
    with AotiProgram.quiet_torch_deprecations():
        # module() shares the program's own buffers: a copy keeps its state as exported
        replayed = copy.deepcopy(program.module())
    return run.differs_with(replayed, calls)


def compiling_localizer(
    program: AotiProgram,
    registry: ProgramRegistry,
    *,
    device: torch.device,
    tolerance: Tolerance,
    configs: Mapping[str, Any],
    label: str,
) -> Localizer:
    """What names the first diverging node of a check the AOTI compile broke: one
    instrumented compile, through the registry like any program."""

    def localize_failure(args: tuple[Any, ...], kwargs: dict[str, Any], calls: int) -> Any:
        def compile_engine(exported: ExportedProgram) -> Any:
            instrumented = registry.program_for(
                exported,
                device=device,
                inductor_configs=configs,
                label=f"{label} (instrumented to find the diverging node)",
            )
            return instrumented.engine_in_exported_state()

        return localize(
            program.decomposed,
            args,
            kwargs,
            compile_engine=compile_engine,
            tolerance=tolerance,
            calls=calls,
        )

    return localize_failure
