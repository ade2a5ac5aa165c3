"""Deployment probes: call the raw engine the way deployed callers will, and judge it.

A passing check certifies the engine on the test's own tensors. A deployed engine gets
others: channels_last images, cropped views, another batch size, another value of a
Python scalar, aliased tensors. An AOTInductor engine checks none of that unless the
serving process sets ``AOTI_RUNTIME_CHECK_INPUTS=1``. Each probe calls the raw engine
(without the plugin's guards) on a variant of the example, compares it with eager on the
same variant, and judges it against the exported program's own contract (the guards of
``exported.module()``, and the dtype and device every input was exported with):

- ``ok``: the engine matches eager;
- ``refused``: the engine raises an error;
- ``wrong``: the exported program accepts the variant and the engine silently returns
  something else than eager;
- ``unguarded``: the exported program refuses the variant, the engine runs it anyway and
  returns something else (every engine without input checks shares this hazard).

Edge values (kind ``values``: NaN, infinities, magnitudes near overflow and of 1e10 and
more) are compared with the fp64 rule, as parity is: far from the example, float32 eager
is itself inexact. They are hazards of their own group (input checks refuse no values) and
fail a check only with ``values="edge"``; ``values="off"`` leaves them out.

Variants are chosen in :mod:`.variants`. Every engine call runs in the test
process's one long-lived child (:mod:`.runner` keeps :mod:`.child` running): a
variant may make the engine read out of bounds, and on CUDA an illegal access poisons the
process. The child loads each package a second time with the engine's input checks on,
which tells whether ``AOTI_RUNTIME_CHECK_INPUTS=1`` would have refused the variant (the
variant's :func:`~pytest_aoti.probes.outcomes.hazard_group`, and whether it
:func:`~pytest_aoti.probes.outcomes.fails` in a declared serving mode).
Outcomes are a property of the engine: they are kept with the package (see
:class:`ProbeCache`), so a warm run probes nothing.
"""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.utils._pytree as pytree

from pytest_aoti.api import (
    AotiCheckError,
    CheckContext,
    CheckPlan,
    Comparison,
    Finding,
    Float64Reference,
    InputRun,
    Outcome,
    Phase,
    ProgramCall,
    RecordPart,
    Triage,
)
from pytest_aoti.probes.feature import PROBE_KIND, PROBE_KINDS, ProbeOptions
from pytest_aoti.probes.guards import Judged, call_on_clones, clone_keeping_aliases, guard
from pytest_aoti.probes.outcomes import (
    EDGE_KIND,
    HAZARDS,
    ProbeOutcome,
    ProbeReport,
    with_remedy,
)
from pytest_aoti.probes.runner import (
    CHILD_TIMEOUT,
    child_results,
    run_child,
    start_child,
    with_tensors,
)
from pytest_aoti.probes.variants import Variant, check_skip, choose_variants

if TYPE_CHECKING:
    from pytest_aoti.api import AotiProgram, Tolerance


PROBE_FORMAT = 2
"""Version of the cached outcomes: part of their key (2: edge values, compared with the
fp64 rule)."""


ProbeCache = CheckContext.ProgramAttachments
"""Where outcomes are kept with the package: the registry's sidecar data."""


# --- the check ---------------------------------------------------------------------------


class ProbesCheck:
    """Deployment probes of a program that passed every other check (``probes=`` off,
    report or fail; ``probes_skip=``; ``serving_checks``; ``values=`` for edge values): the
    outcomes are the ``probes`` figure; under ``fail`` a ``wrong`` variant fails the check
    (an edge value: under ``values="edge"``), except, with serving checks declared, one the
    engine refuses with ``AOTI_RUNTIME_CHECK_INPUTS=1``."""

    name = "probes"
    figures = ("probes",)
    """The figures its outcome reports (the :class:`~pytest_aoti.CheckResult`'s names)."""
    phase: Phase = "engine"

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        # a random program's values cannot match eager on any variant
        edge, _ = edge_values(plan, context)
        wanted = plan.options.of(ProbeOptions).probes != "off" or edge == "fail"
        return wanted and not context.random_ops

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        __tracebackhide__ = True
        options = plan.options.of(ProbeOptions)
        edge, edge_skip = edge_values(plan, context)
        budget = context.budget

        def depth(planned: int, earlier: int, runs: int) -> int:
            # edge values that fail the check are asked for: they run whatever the budget
            return budget.plan(
                self.name, planned, earlier=earlier, loads=True, given=edge == "fail", runs=runs
            )

        report, variants = run_probes(
            context.program,
            plan.module,
            *plan.input_sets[0],
            tolerance=plan.tolerance,
            skip=probe_skip(options.probes, options.probes_skip, edge, edge_skip),
            cache=context.attachments,
            depth=depth,
        )
        if self.name not in budget.checks:  # every variant kept from earlier runs
            depth(len(variants), len(variants), 0)
        budget.ran(self.name, report.ran)
        failing = report.failing(options.serving_checks, probes=options.probes, edge=edge)
        if failing:
            raise probe_failure(report, variants, plan.module, context.triage, failing)
        record = RecordPart(
            {"probes": report.to_json(), "probes_cached": report.cached},
            # the probes could not run: a note, never a failure
            properties=(("aoti_probes_error", report.error),) if report.error else (),
        )
        return Outcome(figures={"probes": report}, record=record)


def edge_values(plan: CheckPlan, context: CheckContext) -> tuple[str, frozenset[str]]:
    """``(mode, inputs left out)`` of the edge values, as the values plugin answers the
    ``pytest_aoti_edge_values`` hook; ``("off", ...)`` where nothing answers."""
    item = context.item
    if item is None:
        return "off", frozenset()
    answer = item.config.hook.pytest_aoti_edge_values(plan=plan)
    return answer if answer is not None else ("off", frozenset())


def probe_skip(
    probes: str, probes_skip: Any, edge: str, edge_skip: frozenset[str] | None
) -> dict[str, frozenset[str]]:
    """The variant kinds left out, by input name (``"*"``: every input): ``probes_skip``;
    every kind but edge values under ``probes="off"`` (edge values that fail run alone);
    edge values under ``edge="off"`` and for the inputs of ``edge_skip``."""
    skip = dict(check_skip(probes_skip))

    def add(name: str, kinds: Iterable[str]) -> None:
        skip[name] = skip.get(name, frozenset()) | frozenset(kinds)

    if probes == "off":
        add("*", set(PROBE_KINDS) - {EDGE_KIND})
    if edge == "off":
        add("*", {EDGE_KIND})
    for name in edge_skip or ():
        add(name, {EDGE_KIND})
    return skip


# --- the entry point ---------------------------------------------------------------------


def run_probes(
    program: AotiProgram,
    module: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    *,
    tolerance: Tolerance,
    skip: Mapping[str, frozenset[str]] | None = None,
    cache: ProbeCache | None = None,
    timeout: float = CHILD_TIMEOUT,
    depth: Callable[[int, int, int], int] | None = None,
) -> tuple[ProbeReport, list[Variant]]:
    """Probe ``program``'s engine with variants of the example ``(args, kwargs)``.

    Returns the report and the variants (whose inputs a ``fail`` policy puts into the
    repro bundle). Outcomes come from ``cache`` where this program was probed the same
    way before, variant by variant; the variants no run has probed yet are probed in one
    child process, and their outcomes kept in ``cache``. ``depth(planned, earlier, runs)``
    says how many of them this run probes (default: all), given the variants, those
    earlier runs probed and how many runs did. Never raises for what the engine does;
    ``args`` are not modified.
    """
    started = time.perf_counter()
    skip = skip or {}
    try:
        variants = choose_variants(program, args, kwargs, skip)
        key = _spec_digest(program, variants, skip, tolerance)
    except Exception as error:  # inputs the probes cannot vary: say so, fail nothing
        return ProbeReport((), error=f"{type(error).__name__}: {error}"), []
    kept = _Kept.read(cache, program.key, key, len(variants))
    if kept.complete:
        return ProbeReport(kept.outcomes, cached=True, skipped=kept.skipped), variants
    pending = [index for index in range(len(variants)) if index not in kept.done]
    count = depth(len(variants), len(kept.done), kept.runs) if depth is not None else len(pending)
    chosen = pending[:count]
    if not chosen:  # left for a later run: what earlier runs found stands
        return ProbeReport(kept.outcomes, cached=bool(kept.done), skipped=kept.skipped), variants
    try:
        outcomes_list, skipped_list = _probe(
            program,
            module,
            [variants[index] for index in chosen],
            tolerance,
            timeout,
            (args, kwargs),
        )
    except Exception as error:  # a probe's own failure never fails a passed check
        return ProbeReport(kept.outcomes, error=f"{type(error).__name__}: {error}"), variants
    report = ProbeReport(
        (*kept.outcomes, *outcomes_list),
        seconds=time.perf_counter() - started,
        skipped=(*kept.skipped, *skipped_list),
        ran=len(chosen),
    )
    if cache is not None and not any(_transient(item) for item in outcomes_list):
        stored = dict(cache.attached(program.key, "probes") or {})
        stored[key] = {
            "outcomes": report.to_json(),
            "skipped": list(report.skipped),
            "done": sorted(kept.done | set(chosen)),
            "runs": kept.runs + 1,
        }
        try:
            cache.attach(program.key, "probes", stored)
        except Exception:  # keeping outcomes is an economy: never fail a check for it
            pass
    return report, variants


@dataclass(frozen=True)
class _Kept:
    """The outcomes earlier runs kept of one probe plan, and which variants they probed."""

    outcomes: tuple[ProbeOutcome, ...] = ()
    skipped: tuple[str, ...] = ()
    done: frozenset[int] = frozenset()
    runs: int = 0
    complete: bool = False

    @classmethod
    def read(cls, cache: ProbeCache | None, program: str, key: str, variants: int) -> _Kept:
        entry = (cache.attached(program, "probes") or {}).get(key) if cache is not None else None
        if not isinstance(entry, dict) or not isinstance(entry.get("outcomes"), list):
            return cls()
        try:
            outcomes = tuple(ProbeOutcome.from_json(item) for item in entry["outcomes"])
            skipped = tuple(str(item) for item in entry.get("skipped", []))
        except (TypeError, ValueError):
            return cls()
        done_list = entry.get("done")
        if done_list is None:  # kept whole, by a run that probed every variant
            done = frozenset(range(variants))
        else:
            done = frozenset(i for i in done_list if isinstance(i, int) and 0 <= i < variants)
        runs = entry.get("runs")
        return cls(
            outcomes,
            skipped,
            done,
            runs if isinstance(runs, int) else 1,
            complete=len(done) >= variants,
        )


def _transient(outcome: ProbeOutcome) -> bool:
    """An outcome of the machine's moment, not of the engine (a variant not run in time, an
    engine that did not return): kept, it would stand for the package on every later run."""
    return outcome.detail.startswith("not run:") or "did not return within" in outcome.detail


def _spec_digest(
    program: AotiProgram,
    variants: list[Variant],
    skip: Mapping[str, frozenset[str]],
    tolerance: Tolerance,
) -> str:
    """What the outcomes of a program depend on besides its package."""

    def shape_of(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return [list(value.shape), str(value.dtype), list(value.stride())]
        return repr(value)

    described = {
        "format": PROBE_FORMAT,
        "variants": [
            [v.input, v.variant, [shape_of(leaf) for leaf in _leaves((v.args, v.kwargs))]]
            for v in variants
        ],
        "skip": {name: sorted(kinds) for name, kinds in sorted(skip.items())},
        "tolerance": [tolerance.rtol, tolerance.atol, tolerance.base_rtol, tolerance.base_atol],
    }
    text = json.dumps(described, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _leaves(tree: Any) -> list[Any]:
    return list(pytree.tree_leaves(tree))


def _probe(
    program: AotiProgram,
    module: torch.nn.Module,
    variants: list[Variant],
    tolerance: Tolerance,
    timeout: float,
    example: tuple[tuple[Any, ...], Mapping[str, Any]],
) -> tuple[list[ProbeOutcome], list[str]]:
    """Eager and the exported program's guards here, the engine in a child process: eager
    first (a variant eager rejects never reaches the engine), then the child's calls while
    the guards run here, where the cores hold both processes' threads."""
    with warnings.catch_warnings():
        # a variant's eager or guarded run may warn (under filterwarnings=error, raise):
        # that says nothing about the engine
        warnings.simplefilter("ignore")
        judged, skipped = _eager_runs(program, module, variants)
        if not judged:
            return [], skipped
        started = time.perf_counter()
        beside = (
            CheckContext.child_beside()
        )  # else the guards run first: the cores do not hold both
        if not beside:
            guard(program, judged, example)
        pending = start_child(program, [item.variant for item in judged], timeout, (False,))
        try:
            if beside:
                guard(program, judged, example)
        except BaseException:
            pending.discarded()
            raise
    ran = child_results(pending)
    outcomes = [
        _judge(program, item, ran.get((index, False)), None, tolerance)
        for index, item in enumerate(judged)
    ]
    # the engine with its input checks runs only what the engine got wrong: whether the
    # checks refuse it is the hazard's remedy (None on an outcome that is no hazard)
    hazards = [index for index, made in enumerate(outcomes) if made.outcome in HAZARDS]
    if hazards:
        left = max(1.0, timeout - (time.perf_counter() - started))
        rerun = run_child(program, [judged[i].variant for i in hazards], left, checked=(True,))
        for position, index in enumerate(hazards):
            outcomes[index] = _judge(
                program,
                judged[index],
                ran.get((index, False)),
                rerun.get((position, True)),
                tolerance,
            )
    return outcomes, skipped


def _eager_runs(
    program: AotiProgram, module: torch.nn.Module, variants: list[Variant]
) -> tuple[list[Judged], list[str]]:
    """Eager's result of each variant it accepts (the others skipped)."""
    judged: list[Judged] = []
    skipped: list[str] = []
    # one eager copy and one float64 copy for every variant, put back before each
    copies = InputRun.module_copies(module)
    for variant in variants:
        try:
            eager = call_on_clones(
                copies.eager().module,
                *(variant.eager_inputs or (variant.args, variant.kwargs)),
            )
        except Exception:  # eager itself rejects the variant: nothing a caller can do
            skipped.append(f"{variant.input}: {variant.variant} (eager rejects it)")
            continue
        reference = None
        if variant.kind == EDGE_KIND:
            # the float64 copy of the module as given, shared with the other variants
            reference = Float64Reference(
                program, module, variant.args, dict(variant.kwargs), shared=copies.float64
            )
        judged.append(Judged(variant, not variant.outside_contract, eager, reference))
    return judged, skipped


def _judge(
    program: AotiProgram,
    item: Judged,
    unchecked: dict[str, Any] | None,
    checked: dict[str, Any] | None,
    tolerance: Tolerance,
) -> ProbeOutcome:
    variant = item.variant
    refused_with_checks: bool | None = None
    if checked is not None and "crashed" not in checked:
        refused_with_checks = "error" in checked
    hazard = "wrong" if item.accepted else "unguarded"

    def outcome(
        name: str, max_abs: float | None = None, max_rel: float | None = None, detail: str = ""
    ) -> ProbeOutcome:
        made = ProbeOutcome(
            input=variant.input,
            variant=variant.variant,
            outcome=name,
            kind=variant.kind,
            max_abs=max_abs,
            max_rel=max_rel,
            refused_with_checks=refused_with_checks,
            detail=detail,
        )
        return with_remedy(made) if name in HAZARDS else made

    if unchecked is None or "crashed" in unchecked:
        return outcome(hazard, detail=str((unchecked or {}).get("crashed", "no result")))
    if "error" in unchecked:
        return outcome("refused", detail=str(unchecked["error"]))
    assert item.eager is not None
    engine_inputs = with_tensors(program, variant, unchecked["inputs"])
    engine = (unchecked["outputs"], engine_inputs)
    mismatch = _mismatch(program, item.eager, engine, tolerance, item.reference)
    if mismatch is None:
        return outcome("ok")
    return outcome(hazard, *mismatch)


def _mismatch(
    program: AotiProgram,
    eager: tuple[Any, Any],
    engine: tuple[Any, Any],
    tolerance: Tolerance,
    reference: Float64Reference | None = None,
) -> tuple[float | None, float | None, str] | None:
    """None when the engine's outputs and inputs after the call match eager's (with the
    fp64 rule where ``reference`` is given); else the figures of the first leaf that
    differs (None where shapes differ) and what differed."""

    def on_cpu(tree: Any) -> Any:
        return pytree.tree_map(
            lambda leaf: leaf.cpu() if isinstance(leaf, torch.Tensor) else leaf, tree
        )

    eager_out, (eager_args, eager_kwargs) = eager
    engine_out, (engine_args, engine_kwargs) = engine

    def fp64(get: Callable[[], Any] | None) -> Callable[[], Any] | None:
        return None if get is None else (lambda: on_cpu(get()))

    pairs: list[tuple[str, Any, Any, Callable[[], Any] | None]] = [
        ("output", eager_out, engine_out, fp64(reference.outputs_after(1) if reference else None))
    ]
    try:
        call = ProgramCall(program.exported)
        eager_named = call.named(eager_args, eager_kwargs)
        engine_named = call.named(engine_args, engine_kwargs)
        for name in sorted(program.mutated_inputs):
            pairs.append(
                (
                    f"input '{name}'",
                    eager_named.get(name),
                    engine_named.get(name),
                    fp64(reference.input_after(1, name) if reference else None),
                )
            )
    except (ValueError, KeyError, TypeError):
        pass
    for what, want, got, expected_fp64 in pairs:
        try:
            Comparison(tolerance).trees(
                on_cpu(want),
                on_cpu(got),
                what=what,
                reference=expected_fp64,
                scalar_dtypes=program.scalar_output_dtypes if what == "output" else (),
            )
        except AotiCheckError as error:
            finding = error.finding
            figures = finding.figures
            if figures is not None and figures.mismatched:
                return figures.max_abs, figures.max_rel, f"{finding.location} differs"
            return None, None, finding.headline(stage=False)
    return None


def probe_failure(
    report: ProbeReport,
    variants: list[Variant],
    module: torch.nn.Module,
    triage: Triage | None = None,
    failing: list[ProbeOutcome] | None = None,
) -> AotiCheckError:
    """The ``fail`` policy's error: every ``failing`` variant (by default every ``wrong``
    one), the first one's input set in the repro bundle (its replay, made by ``triage``)."""
    wrong = report.wrong if failing is None else failing
    first = wrong[0]
    edge = all(item.kind == EDGE_KIND for item in wrong)
    lines = [
        f"input '{item.input}' {item.variant}: {item.figures()}"
        + (
            ""
            if item.refused_with_checks is None
            else f"; with AOTI_RUNTIME_CHECK_INPUTS=1 the engine "
            f"{'refuses it' if item.refused_with_checks else 'runs it too'}"
        )
        for item in wrong
    ]
    if edge:  # one remedy says it for every edge value
        remedies = [f"remedy: {first.remedy}"]
        headline = (
            f'edge values (values="edge"): the engine differs from eager on {len(wrong)} '
            f"input set(s) with values outside the example's range"
        )
        leave_out = (
            "values_skip={'" + first.input + "'} leaves out an input whose values callers "
            "keep in range"
        )
    else:
        remedies = list(dict.fromkeys(f"remedy ({item.variant}): {item.remedy}" for item in wrong))
        headline = (
            f"deployment probe: the engine silently differs from eager on {len(wrong)} "
            f"input variant(s) the exported program accepts"
        )
        leave_out = (
            'probes_skip={"' + first.input + '": {"' + first.kind + '"}} leaves out a '
            "variant the model does not support"
        )
    error = AotiCheckError(
        Finding(
            kind=PROBE_KIND,
            location=f"input '{first.input}'",
            message=f"{headline} (first: input '{first.input}' {first.variant}, {first.figures()})",
            summary="",
            details=tuple(lines),
            notes=(*remedies, f"the repro bundle holds the first variant's input; {leave_out}"),
            stage="compile",
            extra={"probes": report.to_json(), "probes_cached": report.cached},
            record_fields={"probes": report.to_json(), "probes_cached": report.cached},
        )
    )
    chosen = next(
        (v for v in variants if v.input == first.input and v.variant == first.variant), None
    )
    if chosen is None or triage is None:
        return error  # the tester replays the example instead
    # the stage is known (the exported program accepts the input): no attribution; a deep
    # copy keeps the variant's strides, offsets and aliasing: what the engine got
    args, kwargs = clone_keeping_aliases((chosen.args, dict(chosen.kwargs)))
    return triage.replayed(error, module, (tuple(args), kwargs), 1)
