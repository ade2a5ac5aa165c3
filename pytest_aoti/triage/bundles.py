"""Keeping a repro bundle of a failed check (``--aoti-keep-failed``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_aoti.api import FindingKind
from pytest_aoti.triage.repro import reproduces, write_bundle

if TYPE_CHECKING:
    from pytest_aoti.api import AotiCheckError, AotiProgram, BundleAdapter, Feature


def bundle_adapters(features: Sequence[Feature]) -> dict[str, BundleAdapter]:
    """Each feature kind's bundle adapter, by kind: the features say how their kinds of
    failure are reproduced."""
    return {kind: f.bundle for f in features if f.bundle is not None for kind in f.kinds}


def worth_keeping(
    program: AotiProgram, error: AotiCheckError, adapters: Mapping[str, BundleAdapter] = {}
) -> bool:
    """Whether ``error`` gets a bundle: it has an input set to replay, and ``repro.py`` can
    reproduce its kind of failure (a bundle that could not reproduce it misleads)."""
    if error.replay is None:
        return False
    adapter = adapters.get(error.finding.kind)
    finding = error.finding.to_json()
    return reproduces(finding, program.mutated_inputs, program.mutated_buffers, adapter) is not None


def keep_bundle(
    directory: Path,
    program: AotiProgram,
    error: AotiCheckError,
    adapters: Mapping[str, BundleAdapter] = {},
) -> str | None:
    """Write the bundle of ``error`` into ``directory``; return the line the failure shows
    about it (None where the failure gets no bundle, see :func:`worth_keeping`). Never
    raises: the bundle is a bonus, the failure is what matters."""
    replay = error.replay
    if replay is None or not worth_keeping(program, error, adapters):
        return None
    adapter = adapters.get(error.finding.kind)

    tolerance = error.finding.tolerance or {}
    # only a tolerance the test set goes into the bundle: the others are torch's defaults
    explicit = bool(tolerance.get("explicit"))
    try:
        # only a buffer finding needs the buffers read back (torch's private runner);
        # any other replays through the package's own loader
        eager_results, eager_buffers = replay.eager_run(
            program,
            buffers=bool(program.mutated_buffers) and error.finding.kind == FindingKind.BUFFER,
        )
        script = write_bundle(
            directory,
            exported=program.exported,
            package_path=program.package_path,
            args=replay.args,
            kwargs=replay.kwargs,
            calls=replay.calls,
            eager_results=eager_results,
            rtol=tolerance.get("rtol") if explicit else None,
            atol=tolerance.get("atol") if explicit else None,
            finding_text=error.finding.render(),
            finding_json=error.finding.to_json(),
            device=program.device,
            mutated_inputs=program.mutated_inputs,
            eager_buffers=eager_buffers,
            custom_op_modules=program.child_preparation().imports,
            weights=replay.weights(),
            step_inputs=replay.step_inputs,
            adapter=adapter,
        )
    except Exception as problem:  # the bundle is a bonus: never mask the failure
        return f"repro bundle not written: {type(problem).__name__}: {problem}".splitlines()[0]
    return (
        f"repro bundle: {script.parent} (python {script} exits "
        f"{_reproduced_status(error, adapter)} while it "
        "reproduces this failure, 0 once fixed, 2 if it cannot run)"
    )


def _reproduced_status(error: AotiCheckError, adapter: BundleAdapter | None) -> str:
    """The exit status of ``repro.py`` while it reproduces ``error``: 1, or 128+N with the
    signal's name for an engine that killed its process by signal N (also found on a
    generated shape: what the bundle reproduces decides, not the outer finding's kind)."""
    target = reproduces(error.finding.to_json(), adapter=adapter) or {}
    number = error.finding.extra.get("signal")
    if target.get("kind") == FindingKind.CRASH and isinstance(number, int):
        return f"{128 + number} ({target['location']})"
    return "1"
