"""The values check: after parity on the example, the same program compared with eager on
input sets of generated values (:mod:`.draws`), through parity's own path.

No compile: every draw runs on the one engine (a program with buffer state loads a fresh
one per draw, so its draws are capped). A draw the exported program refuses (its runtime
assertions) is skipped; a failing draw is narrowed to the fewest elements that differ from
its plain draw, attributed to a stage (and its node) like any parity failure, and reported
with the input, the element and its value.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch
import torch.utils._pytree as pytree

from pytest_aoti.api import (
    AotiCheckError,
    AotiUsageError,
    CheckContext,
    CheckPlan,
    CrashScreen,
    ExportedRefusals,
    InputBuilder,
    InputRun,
    InputSet,
    Outcome,
    Phase,
    ProgramCall,
    RecordPart,
    StepsRun,
)
from pytest_aoti.values import failing_elements
from pytest_aoti.values.draws import DrawPlan, draw_seed, tie_dependent
from pytest_aoti.values.feature import ValuesOptions
from pytest_aoti.values.graph_constants import graph_constants
from pytest_aoti.values.passes_key import example_digest, mutates_text, tolerance_text
from pytest_aoti.values.position_inputs import position_inputs
from pytest_aoti.values.positions import width_of

if TYPE_CHECKING:
    from pytest_aoti.api import AotiProgram
    from pytest_aoti.values.draws import Draw

STATEFUL_DRAWS = 2
"""Draws at most for a program that mutates registered buffers: each draw loads a fresh
engine (so that every draw starts from the exported state), and each load maps the package
for good."""
NARROWING_RUNS = 64
"""Runs at most spent narrowing a failing draw to its fewest overlaid elements."""
FLOOR_DRAWS = 2
"""Draws a run of a check runs at least, whatever its budget (:mod:`~pytest_aoti.checks.budget`)."""

BATCH_BYTES = 256 * 2**20
"""Drawn input bytes held at once: the draws are made, screened in the child and checked a
batch at a time, so a large cache is not drawn sixteen times over in memory."""
SHOWN_ELEMENTS = 4
"""Elements named in a failure's headline."""
PASSED_SIDECAR = "values_passed_3"
"""The sidecar, kept with the package, of the draws each test compared and passed on earlier
runs, with the example they were drawn from and how many runs ran draws: not run again (``_3``: the draws of the program's constants, of
one-element inputs and of the loop's parts; passes kept before them name other draws)."""
KEPT_EXAMPLES = 4
"""Examples of one test and program whose passed draws are kept (the newest)."""
SIDECAR = "values_failures_2"
"""The sidecar, kept with the package, of the draws that failed each test: tried first on
the next run (``_2``: the draws of meeting inputs; indices kept before them name other
draws)."""


class ValuesCheck:
    """``values_draws`` input sets of generated values, each compared with eager after every
    call, on the one compiled program."""

    name = "values"
    figures: tuple[str, ...] = ()
    phase: Phase = "engine"

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        return (
            plan.options.of(ValuesOptions).values != "off"
            and plan.options.of(ValuesOptions).values_draws > 0
            and not context.random_ops  # a random program's values cannot match
        )

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        __tracebackhide__ = True
        search = _Search(plan, context)
        search.run()
        return Outcome(stats=tuple(search.stats), input_sets=search.count, record=search.record())


@dataclass
class _Failed:
    draw: Draw
    values: dict[str, Any]
    """The failing values by input name (narrowed: only the elements that matter overlaid)."""
    error: AotiCheckError
    points: list[tuple[str, list[int]]] = field(default_factory=list)
    """The overlaid elements left after narrowing: (input name, index)."""


class _Search:
    """The draws of one check, run in order; the first failure ends them."""

    def __init__(self, plan: CheckPlan, context: CheckContext) -> None:
        self.plan = plan
        self.context = context
        self.program: AotiProgram = context.program
        exported = self.program.exported
        args, kwargs = plan.input_sets[0]
        self.named = ProgramCall(exported).named(args, kwargs)
        self.rebuild = _rebuilder(self.named, args, kwargs)
        skip = plan.options.of(ValuesOptions).values_skip or frozenset()
        unknown = sorted(set(skip) - set(self.named))
        if unknown:
            raise AotiUsageError(
                f"values_skip names {', '.join(map(repr, unknown))}, which the program does "
                f"not take: its inputs are {', '.join(map(repr, self.named))}"
            )
        self.skip = skip
        self.no_repeats = tie_dependent(exported)
        one_element = tuple(
            name
            for name, leaf in self.named.items()
            if isinstance(leaf, torch.Tensor) and leaf.numel() == 1
        )
        self.positions = position_inputs(exported, one_element)
        """One-element inputs the program uses as positions: they keep their values."""
        self.width = width_of(self.program)
        self.plan_of_draws = DrawPlan(
            self.named,
            draws=plan.options.of(ValuesOptions).values_draws,
            no_repeats=self.no_repeats,
            keep=skip | self.positions,
            constants=graph_constants(exported),
            width=self.width,
        )
        self.draws = self.plan_of_draws.count
        if self.program.mutated_buffers and not self.given:
            self.draws = min(self.draws, STATEFUL_DRAWS)
        self.count = 0
        self.kept = 0
        """Draws passed on an earlier run of this test and package: not run again."""
        self.left = 0
        """Draws no run has reached yet: a later run of this test and package runs them."""
        self.refused = 0
        self.refused_by_eager = 0
        self.stats: list[Any] = []
        self.failed: _Failed | None = None
        self.seconds = 0.0
        self.started = 0.0

        self._refusals = ExportedRefusals.where_it_refuses(exported)
        self._screen = CrashScreen.where_on(plan, context)

    def run(self) -> None:
        __tracebackhide__ = True
        self.started = time.perf_counter()
        try:
            self._run()
        finally:
            self.seconds = time.perf_counter() - self.started

    def _run(self) -> None:
        __tracebackhide__ = True
        kept = self._kept_failures()
        passed, runs = self._kept_passes()
        # a draw that failed on an earlier run goes first, also one beyond values_draws now;
        # one passed on an earlier run of this package is not run again
        pending = [k for k in range(self.draws) if k not in kept and k not in passed]
        self.kept = sum(1 for k in range(self.draws) if k in passed and k not in kept)
        count = self.context.budget.plan(  # from the program's size, before the first draw
            "values",
            self.draws,
            earlier=self.draws - len(pending),
            floor=FLOOR_DRAWS,
            given=self.given,
            runs=runs,
            why=self.why,
            calls=self.plan.steps,  # a draw of a decode loop reads the program per step
        )
        order = [*kept, *pending[:count]]
        self.left = len(pending) - count
        chosen = iter(order)
        done = 0  # draws run or refused
        newly_passed: list[int] = []
        while done < len(order):
            batch: list[tuple[Draw, InputSet]] = []
            size = 0
            while size < BATCH_BYTES:
                index = next(chosen, None)
                if index is None:
                    break
                done += 1
                seed = draw_seed(self.context.label, self.program.key, index)
                draw = self.plan_of_draws.draw(index, seed)
                inputs = self.rebuild(draw.values)
                if self._refusals is not None and self._refusals.refusal(*inputs) is not None:
                    self.refused += 1  # the program's own assertion: not the engine's fault
                    newly_passed.append(index)  # refused on every run: not drawn again
                    continue
                batch.append((draw, inputs))
                size += InputBuilder.tensor_bytes(inputs)
            if not self._run_batch(batch, newly_passed):
                break
        self.context.budget.ran("values", done)
        if newly_passed or (count and not self.failed):  # a run of this test, counted
            self._keep_passes(passed | set(newly_passed), runs + 1)
        if self.failed is not None:
            self._keep_failure(self.failed.draw.index)
            raise self._reported(self._narrowed(self.failed)) from None
        if kept and done >= len(kept):
            self._keep_failure(None)

    @property
    def given(self) -> bool:
        """The user gave ``values_draws``: it runs in full, the cap included."""
        return self.plan.options.gave("values_draws")

    @property
    def why(self) -> str:
        """The rule that set :attr:`draws` apart from ``values_draws``, if any."""
        asked = self.plan.options.of(ValuesOptions).values_draws
        if self.program.mutated_buffers and not self.given and self.draws < asked:
            return (
                f"{STATEFUL_DRAWS} draws at most for a program with buffer state (each loads "
                "a fresh engine); a values_draws given runs in full"
            )
        if self.plan_of_draws.count > asked:
            return f"{self.plan_of_draws.count - asked} meeting draws beyond values_draws"
        return ""

    @functools.cached_property
    def _passes_key(self) -> str | None:
        """What the draws of this check depend on beyond the package and the test: the
        example (every element), the draws asked for, the tolerance, calls and ``mutates``;
        None where the example cannot be read that way."""
        parts = (
            example_digest(self.plan.input_sets[0]),
            self.plan_of_draws.count,
            self.plan_of_draws.meetings,
            self.plan_of_draws.constants,
            sorted(self.skip),
            tolerance_text(self.plan.tolerance),
            self.context.calls,
            mutates_text(self.plan.mutates),
            self.plan.steps,
            mutates_text({"next_inputs": self.plan.next_inputs}),
        )
        return None if parts[0] is None else repr(parts)

    def _kept_passes(self) -> tuple[set[int], int]:
        """The draws this test passed (or its program refused) on earlier runs of this
        package and example, and how many runs ran draws."""
        attachments = self.context.attachments
        key = self._passes_key  # the example read once
        if attachments is None or not self.context.label or key is None:
            return set(), 0
        data = attachments.attached(self.program.key, PASSED_SIDECAR) or {}
        entries = data.get(self.context.label)
        entry = (
            next((e for e in entries if isinstance(e, dict) and e.get("key") == key), None)
            if isinstance(entries, list)
            else None
        )
        if entry is None:
            return set(), 0
        draws = {index for index in entry.get("draws", ()) if isinstance(index, int)}
        runs = entry.get("runs")
        return draws, runs if isinstance(runs, int) and runs > 0 else 1

    def _keep_passes(self, draws: set[int], runs: int) -> None:
        """Keep the draws this test has passed on this package, for the next run."""
        attachments = self.context.attachments
        key = self._passes_key  # the example read once
        if attachments is None or not self.context.label or key is None:
            return
        data = dict(attachments.attached(self.program.key, PASSED_SIDECAR) or {})
        earlier = data.get(self.context.label)
        others = [
            e
            for e in (earlier if isinstance(earlier, list) else [])
            if isinstance(e, dict) and e.get("key") != key
        ]
        # the newest first; a test's few checks of one program each keep theirs
        entry = {"key": key, "draws": sorted(draws), "runs": runs}
        data[self.context.label] = [entry, *others][:KEPT_EXAMPLES]
        try:
            attachments.attach(self.program.key, PASSED_SIDECAR, data)
        except OSError:  # not kept: the next run compares them again
            pass

    def _kept_failures(self) -> list[int]:
        """The draws that failed this test on earlier runs (kept with the package)."""
        attachments = self.context.attachments
        data = attachments.attached(self.program.key, SIDECAR) if attachments is not None else None
        index = (data or {}).get(self.context.label)
        return [index] if isinstance(index, int) and index >= 0 else []

    def _keep_failure(self, index: int | None) -> None:
        """Keep the failing draw's index for the next run (None: this test passes now)."""
        attachments = self.context.attachments
        if attachments is None or not self.context.label:
            return
        data = dict(attachments.attached(self.program.key, SIDECAR) or {})
        if index is None:
            data.pop(self.context.label, None)
        else:
            data[self.context.label] = index
        try:
            attachments.attach(self.program.key, SIDECAR, data)
        except OSError:  # a draw not kept is found again by its seed: never a failure
            pass

    def _run_batch(self, batch: list[tuple[Draw, InputSet]], passed: list[int]) -> bool:
        """Run eager on each draw of the batch (a draw eager refuses is refused), screen
        the rest in one child request, then check each in this process (adding each that
        passes to ``passed``); False once one failed (kept in :attr:`failed`)."""
        __tracebackhide__ = True
        runs = []
        refused: list[int] = []
        # the child makes the draws' engine calls while eager makes its own here, where the
        # cores hold both, unless eager refused earlier draws (the engine is not asked what
        # eager refuses)
        screening = (
            self._screen.start_all(
                [inputs for _, inputs in batch],
                [f"values draw {draw.index}" for draw, _ in batch],
                serve=True,
            )
            if self._screen is not None
            and not self.refused_by_eager
            and CheckContext.child_beside()
            else None
        )
        try:
            for position, (draw, inputs) in enumerate(batch):
                run = self._input_run(draw.index, inputs)
                try:
                    run.eager_history(self.context.calls)
                except (
                    InputRun.EagerRaised
                ):  # the module itself refuses these values: not a finding
                    self.refused += 1
                    self.refused_by_eager += 1
                    refused.append(position)
                    continue
                runs.append((draw, inputs, run))
        except BaseException:
            if screening is not None:
                screening.discard()
            raise
        if screening is not None:  # a crash raises here
            screening.finish(ignore=refused)
        elif self._screen is not None and runs:
            # the child's calls are the draws' engine calls (each draw runs once)
            self._screen.screen_all(
                [inputs for _, inputs, _ in runs],
                [f"values draw {d.index}" for d, _, _ in runs],
                serve=True,
            )
        if not runs:
            return True
        for draw, _, run in runs:
            try:
                self.stats += self._checked(run)
            except AotiCheckError as error:
                self.failed = _Failed(draw, dict(draw.values), error)
                return False
            except InputRun.EagerRaised:  # a later step of the draw's loop the module refuses
                self.refused += 1
                self.refused_by_eager += 1
                continue
            self.count += 1
            passed.append(draw.index)
        return True

    def _input_run(self, index: int, inputs: InputSet, *, attribute: bool = False) -> InputRun:
        """Draw ``index`` as parity runs an input set, on the module's copies the draws
        share (made at the first draw). ``attribute``: a failure is attributed to a stage
        (and localized)."""
        args, kwargs = inputs
        copies = getattr(self, "_copies", None)
        if copies is None:
            copies = self._copies = InputRun.module_copies(self.plan.module)
        engine: Callable[[], Any] = self.context.fresh_engine
        if self._screen is not None:  # the child's calls on this draw, where it made them
            engine = self._screen.search_engine(engine, inputs)
        return InputRun(
            self.program,
            self.plan.module,
            args,
            kwargs,
            tolerance=self.plan.tolerance,
            label=f"values draw {index}",
            triage=self.context.triage,
            attribute=attribute,
            engine=engine,
            copies=copies,
            inputs_owned=True,  # drawn for this run; the example's own inputs are not written
            validated=True,  # laid out like the example, which parity validated
        )

    def _checked(self, run: InputRun) -> list[Any]:
        """One draw's run through parity's path, every call compared, and with ``steps``
        its decode loop from the draw; its figures."""
        stats = run.check(
            self.context.calls, self.plan.mutates, values_too=False, eager_refusals=True
        )
        if self.plan.steps is None or self.plan.next_inputs is None:
            return stats
        return stats + self._chain(run)

    def _chain(self, run: InputRun) -> list[Any]:
        """The draw's decode loop from the drawn inputs, each engine step on a copy of
        eager's inputs of the step: a draw's extreme values would make the rounding of a
        free-running chain grow (the first step's engine inputs were screened with the draw;
        each later one is)."""
        screen = self._screen

        def screened(inputs: InputSet, step: int) -> None:
            if screen is not None and step > 1:
                screen.screen_all([inputs], [f"{run.label}, step {step}"])

        chain = StepsRun(
            self.program,
            self.plan.module,
            run.fresh_inputs(),
            steps=self.plan.steps or 1,
            next_inputs=self.plan.next_inputs,  # type: ignore[arg-type]
            tolerance=self.plan.tolerance,
            eager=self._copies.eager().module,
            engine=self.context.fresh_engine(),
            float64=self._copies.float64,
            screen=screened,
            follow_eager=True,
        ).run()
        return chain.stats

    def _check(self, index: int, inputs: InputSet, *, attribute: bool = False) -> list[Any]:
        """Draw ``index`` through parity's path, every call compared; its figures.
        ``attribute``: a failure is attributed to a stage (and localized)."""
        return self._checked(self._input_run(index, inputs, attribute=attribute))

    def _fails(self, index: int, values: Mapping[str, Any]) -> AotiCheckError | None:
        try:
            self._check(index, self.rebuild(values))
        except AotiCheckError as error:
            return error
        except InputRun.EagerRaised:  # eager refuses the narrowed values: they do not fail
            return None
        return None

    def _narrowed(self, failed: _Failed) -> _Failed:
        """The failing draw with as few overlaid elements as still fail (greedy halving of
        the overlaid elements, at most :data:`NARROWING_RUNS` runs); the plain draw itself
        failing leaves the draw as it is."""
        draw = failed.draw
        points = [
            (name, position)
            for name, mask in draw.masks.items()
            for position in mask.nonzero().tolist()
        ]
        if not points or self._fails(draw.index, draw.plain_values) is not None:
            return failed
        runs, chunk = 1, max(1, len(points) // 2)
        best = _Failed(draw, failed.values, failed.error, points)
        while chunk >= 1 and runs < NARROWING_RUNS:
            shrunk = False
            for start in range(0, len(points), chunk):
                if runs >= NARROWING_RUNS or len(points) <= 1:
                    break
                kept = points[:start] + points[start + chunk :]
                if not kept:
                    continue
                keep = {name: torch.zeros_like(mask) for name, mask in draw.masks.items()}
                for name, position in kept:
                    keep[name][tuple(position)] = True
                values = draw.narrowed(keep)
                runs += 1
                error = self._fails(draw.index, values)
                if error is not None:
                    points, best, shrunk = kept, _Failed(draw, values, error, kept), True
                    break
            if not shrunk:
                chunk //= 2
        return best

    def _reported(self, failed: _Failed) -> AotiCheckError:
        """The failure of ``failed``'s values again, attributed (stage, node, replay), as
        the finding of a values draw."""
        error = failed.error
        try:
            self._check(failed.draw.index, self.rebuild(failed.values), attribute=True)
        except AotiCheckError as attributed:
            error = attributed
        except InputRun.EagerRaised:  # not when it failed: the failure stands as it was found
            pass
        classes = {name: drawn.classes for name, drawn in self.plan_of_draws.drawn.items()}
        points, count = failed.points, len(failed.points)
        if not points:  # a plain draw: the program's constants it took by chance
            points, count = failing_elements.constant_positions(
                failed.values, classes, SHOWN_ELEMENTS
            )
        elements, annotated, met = failing_elements.described_elements(
            points, failed.values, classes, self.width
        )
        inner = error.finding
        shown = ", ".join(elements[:SHOWN_ELEMENTS])
        if count > SHOWN_ELEMENTS:
            shown += f" and {count - SHOWN_ELEMENTS} more"
        headline = f"values draw {failed.draw.index} fails" + (f": {shown}" if shown else "")
        if not failed.points:
            headline += " (a plain draw of the example's range)"
        details = (
            *failing_elements.where_lines(met, annotated, SHOWN_ELEMENTS),
            f"first difference: {inner.headline(stage=False)}",
            *inner.details,
            failing_elements.elements_line(count, planned=bool(failed.points)),
            "the draws come from the test id and the program, and this draw is kept with the "
            "package and tried first: the test fails the same way on every run; replay: run "
            "the test again, or values='off' to leave the check out",
        )
        values_record = {
            "draws": self.draws,
            "meeting": self._meeting_count(),
            "checked": self.count,
            "kept": self.kept,
            "refused": self.refused,
            "failed_draw": failed.draw.index,
            "seconds": round(time.perf_counter() - self.started, 4),
            "elements": elements,
            "special_points": annotated,
            "met": met,
            "constants": list(self.plan_of_draws.constants),
        }
        finding = replace(
            inner,
            message=headline,
            details=details,
            extra={**inner.extra, "values": values_record},
        )
        reported = AotiCheckError(finding)
        reported.replay = error.replay
        return reported

    def record(self) -> RecordPart:
        notes: tuple[str, ...] = ()
        by_program = self.refused - self.refused_by_eager
        if by_program:
            notes += (f"{by_program} values draw(s) refused by the exported program's checks",)
        if self.refused_by_eager:
            notes += (
                f"{self.refused_by_eager} values draw(s) refused by eager PyTorch itself (the "
                "module raised on those values)",
            )
        part = {
            "draws": self.draws,
            "meeting": self._meeting_count(),
            "checked": self.count,
            "kept": self.kept,
            "left": self.left,
            "given": self.given,
            "refused": self.refused,
            "seconds": round(self.seconds, 4),
            "steps": self.plan.steps,
            "constants": list(self.plan_of_draws.constants),
            "positions": sorted(self.positions),
            "pairs_met": {
                part: list(counts) for part, counts in self.plan_of_draws.meeting_plan.parts.items()
            },
        }
        return RecordPart({"values": part}, notes=notes)

    def _meeting_count(self) -> int:
        """Meeting draws among :attr:`draws`."""
        return min(len(self.plan_of_draws.meetings), self.draws)


def _rebuilder(
    named: Mapping[str, Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Callable[[Mapping[str, Any]], InputSet]:
    """``values by input name -> (args, kwargs)`` in the example's structure."""
    leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    name_of = {id(leaf): name for name, leaf in named.items() if isinstance(leaf, torch.Tensor)}
    slots = [name_of.get(id(leaf)) for leaf in leaves]

    def rebuild(values: Mapping[str, Any]) -> InputSet:
        filled = [values[slot] if slot is not None else leaf for slot, leaf in zip(slots, leaves)]
        new_args, new_kwargs = pytree.tree_unflatten(filled, spec)
        return tuple(new_args), dict(new_kwargs)

    return rebuild
