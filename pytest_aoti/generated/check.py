"""Generated input shapes for a dynamic-shape program: boundaries, then a Hypothesis search.

Every generated input set runs through the one compiled program, so the whole search costs
no compile. Sizes are drawn one integer per shape symbol inside the ranges read from the
exported program, so a failure shrinks toward the smallest shape that still fails.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from pytest_aoti.api import (
    AotiCheckError,
    CheckContext,
    CheckPlan,
    CrashScreen,
    ExportedRefusals,
    Finding,
    InputBuilder,
    InputRun,
    InputSet,
    Outcome,
    Phase,
    Triage,
)
from pytest_aoti.generated.feature import SHAPE_KIND, GeneratedOptions
from pytest_aoti.generated.search import Generation, ShapeFailure, search_shapes

if TYPE_CHECKING:
    import torch

    from pytest_aoti.api import AotiProgram, Comparison, ProgramShapes, Tolerance


class GeneratedCheck:
    """With dynamic dims: boundary shapes, then ``examples`` generated ones inside the
    exported ranges, through the one compiled program."""

    name = "generated"
    figures = ("examples",)
    """The figures its outcome reports (the :class:`~pytest_aoti.CheckResult`'s names)."""
    phase: Phase = "engine"

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        return (
            plan.dynamic_shapes is not None
            and bool(plan.options.of(GeneratedOptions).examples)
            and not context.random_ops
        )

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        __tracebackhide__ = True
        options = plan.options.of(GeneratedOptions)
        budget = context.budget
        # a large program's shapes go on where its earlier runs left off (none kept else)
        earlier, runs = _searched_before(context) if budget.limited else (0, 0)
        examples = budget.plan(
            "generated",
            options.examples,
            earlier=min(earlier, options.examples),
            given=plan.options.gave("examples"),
            runs=runs,
        )
        searched: list[int] = []
        count, stats = check_generated(
            context.program,
            plan.module,
            plan.input_sets[0],
            calls=context.calls,
            mutates=plan.mutates,
            tolerance=plan.tolerance,
            generation=Generation(
                examples=examples,
                max_dim=options.max_dim,
                database=context.hypothesis_database,
                label=context.label,
            ),
            triage=context.triage,
            screen=_crash_screen(plan, context),
            engine=context.fresh_engine,
            searched=searched,
        )
        shapes = searched[0] if searched else 0
        budget.ran("generated", shapes)
        if budget.limited and shapes:
            _keep_searched(context, min(options.examples, earlier + shapes), runs + 1)
        return Outcome(stats=tuple(stats), input_sets=count, figures={"examples": count})


SEARCHED_SIDECAR = "generated_searched"
"""The sidecar, kept with a large program's package, of how many generated shapes each test
searched on earlier runs, and over how many runs: a later run searches only the rest."""


def _searched_before(context: CheckContext) -> tuple[int, int]:
    """Generated shapes this test searched on earlier runs of this package, and the runs."""
    attachments = context.attachments
    if attachments is None or not context.label:
        return 0, 0
    entry = (attachments.attached(context.program.key, SEARCHED_SIDECAR) or {}).get(context.label)
    if not isinstance(entry, dict):
        return 0, 0
    shapes, runs = entry.get("shapes"), entry.get("runs")
    if not isinstance(shapes, int) or not isinstance(runs, int):
        return 0, 0
    return max(0, shapes), max(0, runs)


def _keep_searched(context: CheckContext, shapes: int, runs: int) -> None:
    """Keep how many generated shapes this test has searched on this package."""
    attachments = context.attachments
    if attachments is None or not context.label:
        return
    data = dict(attachments.attached(context.program.key, SEARCHED_SIDECAR) or {})
    data[context.label] = {"shapes": shapes, "runs": runs}
    try:
        attachments.attach(context.program.key, SEARCHED_SIDECAR, data)
    except OSError:  # not kept: the next run searches them again
        pass


def _crash_screen(plan: CheckPlan, context: CheckContext) -> CrashScreen | None:
    """The crash screen of the generated input sets (None: switched off)."""
    return CrashScreen.where_on(plan, context)


def check_generated(
    program: AotiProgram,
    module: torch.nn.Module,
    inputs: tuple[tuple[Any, ...], dict[str, Any]],
    *,
    calls: int,
    mutates: Mapping[str, Any] | None,
    tolerance: Tolerance,
    generation: Generation,
    triage: Triage | None = None,
    screen: CrashScreen | None = None,
    engine: Callable[[], Any] | None = None,
    searched: list[int] | None = None,
) -> tuple[int, list[tuple[str, Comparison.LeafStats]]]:
    """Check ``program`` on boundary shapes, then on ``generation.examples`` generated ones,
    each first in the engine child where ``screen`` is given (a crash there ends the search);
    ``engine`` gives the engine each input set runs on (default: the program's). The
    generated shapes that ran (past the boundary shapes) are appended to ``searched``.

    Returns how many input sets were checked and their figures. Raises
    :class:`~pytest_aoti.AotiCheckError` naming the smallest failing shape found.
    """
    __tracebackhide__ = True
    builder = InputBuilder(program, like=inputs[0], like_kwargs=inputs[1])
    if not builder.shapes.symbols:
        return 0, []
    checker = _ShapeChecker(
        program, module, builder, calls, mutates, tolerance, triage, screen, engine
    )

    boundary_failure: ShapeFailure | None = None
    for values in builder.shapes.boundary_assignments(generation.max_dim):
        try:
            checker.run(values, seed=0)
        except ShapeFailure as failure:
            boundary_failure = failure
            boundary_failure.boundary = True
            break
    # a failing boundary is not reported yet: the search below shrinks it, or finds a
    # smaller failing shape, where the boundary alone would only name the extreme. A
    # boundary the exported program refuses is reported as it is: that is the range's edge
    refused = boundary_failure is not None and isinstance(
        boundary_failure.error, ExportedRefusals.Refusal
    )
    search = not refused and checker.crashed is None  # a crash: nothing is run again
    checker.searching = True
    found = (search_shapes(checker, generation, builder.shapes) if search else None) or (
        boundary_failure
    )
    if searched is not None:
        searched.append(checker.searched)
    if found is not None:
        # only the smallest failing shape is attributed to a stage (and localized): the
        # search itself runs many failing shapes
        error = checker.attributed(found)
        # the program's shapes carry the user's Dim names (see AotiProgram.name_dims)
        reported = AotiCheckError(_report(found, error, program.shapes, generation))
        reported.replay = error.replay if isinstance(error, AotiCheckError) else None
        raise reported from None
    return checker.count, checker.stats


AHEAD = 8
"""Generated shapes a request to the engine child carries when the search runs ahead."""


class _ShapeChecker:
    """Runs the core check on the input set built for one assignment of sizes."""

    def __init__(
        self,
        program: AotiProgram,
        module: torch.nn.Module,
        builder: InputBuilder,
        calls: int,
        mutates: Mapping[str, Any] | None,
        tolerance: Tolerance,
        triage: Triage | None,
        screen: CrashScreen | None = None,
        engine: Callable[[], Any] | None = None,
    ) -> None:
        self.program = program
        self.screen = screen
        self.engine = engine
        self.searching = False
        """In the Hypothesis search (past the boundary shapes)."""
        self.searched: int = 0
        """Generated shapes run in the search."""
        self.crashed: ShapeFailure | None = None
        """The first shape whose engine crashed its child: every later run fails with it
        (no engine is called again), and the search reports it unshrunk."""
        self.module = module
        self.triage = triage
        self.builder = builder
        self.calls = calls
        self.mutates = mutates
        self.tolerance = tolerance
        self.count = 0
        self.stats: list[tuple[str, Comparison.LeafStats]] = []

        self._refusals = ExportedRefusals.where_it_refuses(program.exported)
        self._copies: Any = None
        """Eager's and the float64 copy of the module, shared by every shape (made once)."""

    def _input_run(
        self,
        values: dict[str, int],
        seed: int,
        *,
        attribute: bool = False,
        inputs: InputSet | None = None,
    ) -> InputRun:
        """The check of one generated input set (``inputs``: already built for ``values``
        and ``seed``); attributed to a stage (and localized) only once the search has found
        its smallest failing shape."""
        if inputs is None:
            inputs = self.builder.build(values, seed)
        if self._copies is None:
            self._copies = InputRun.module_copies(self.module)
        load = self.engine or self.program.engine_in_exported_state
        args, kwargs = inputs
        return InputRun(
            self.program,
            self.module,
            args,
            kwargs,
            tolerance=self.tolerance,
            label="generated " + _describe_shapes(self.builder.shapes, values),
            triage=self.triage,
            attribute=attribute,
            # the child's calls on this shape, where its screen made them
            engine=self.screen.search_engine(load, inputs) if self.screen is not None else load,
            copies=self._copies,
            inputs_owned=True,  # built for this run alone
            validated=True,  # built from the program's own shapes, inside its ranges
        )

    def run_ahead(self, drawn: list[tuple[dict[str, int], int]]) -> bool:
        """Run the shapes a search drew ahead, :data:`AHEAD` a request: the child calls the
        engine on a batch while eager makes its calls here and the batch before is checked.
        True when every one passed (counted), False (nothing counted) when one failed: the
        search then runs them one at a time, so Hypothesis sees the failure and shrinks it."""
        before = (self.count, len(self.stats), self.searched)
        checked: list[InputRun] = []
        try:
            for start in range(0, len(drawn), AHEAD):
                checked = self._screen_batch(drawn[start : start + AHEAD], then=checked)
            self._check_all(checked)
        except Exception:  # a failure, found again and reported by the search
            self.count, self.searched = before[0], before[2]
            del self.stats[before[1] :]
            return False
        return True

    def _screen_batch(
        self, batch: list[tuple[dict[str, int], int]], then: list[InputRun]
    ) -> list[InputRun]:
        """Build ``batch``'s input sets and have the child run them, checking ``then`` (the
        batch before) and making eager's calls meanwhile; the batch's runs, to check."""
        built: list[tuple[InputSet, InputRun]] = []
        for values, seed in batch:
            if self._refusals is not None:
                seed = self._refusals.accepted_seed(partial(self.builder.build, values), seed)
            inputs = self.builder.build(values, seed)
            built.append((inputs, self._input_run(values, seed, inputs=inputs)))
        if self.screen is None:
            self._check_all(then)
        else:
            self._screening(built, then).finish()
            if not CheckContext.child_beside():
                self._check_all(then)
        return [run for _, run in built]

    def _screening(self, built: list[tuple[InputSet, InputRun]], then: list[InputRun]) -> Any:
        """The child's request for ``built``'s input sets (their calls are the runs' engine
        calls: each runs once), started; where the cores hold both processes, ``then`` is
        checked and eager makes ``built``'s calls meanwhile. Finish it."""
        assert self.screen is not None
        screening = self.screen.start_all(
            [inputs for inputs, _ in built], [run.label for _, run in built], serve=True
        )
        try:
            if CheckContext.child_beside():
                self._check_all(then)
                for _, run in built:
                    with contextlib.suppress(InputRun.EagerRaised):  # its check says so
                        run.eager_history(self.calls)
        except BaseException:
            screening.discard()
            raise
        return screening

    def _check_all(self, runs: list[InputRun]) -> None:
        for run in runs:
            stats = run.check(self.calls, self.mutates, values_too=False)
            self.count += 1
            self.searched += 1
            self.stats += stats

    def run(self, values: dict[str, int], seed: int) -> None:
        try:
            self._run(values, seed)
        finally:
            self.searched += int(self.searching)

    def _run(self, values: dict[str, int], seed: int) -> None:
        if self._refusals is not None:
            # the exported program first: the engine would raise the same, on stderr too
            try:
                seed = self._refusals.accepted_seed(
                    lambda other: self.builder.build(values, other), seed
                )
            except ExportedRefusals.Refusal as refusal:
                raise ShapeFailure(dict(values), seed, refusal) from None
        if self.crashed is not None:
            raise self.crashed
        try:
            inputs = self.builder.build(values, seed)
            run = self._input_run(values, seed, inputs=inputs)
            if self.screen is not None:
                self._screened(values, seed, inputs, run)  # raises its own ShapeFailure: a crash
            stats = run.check(self.calls, self.mutates, values_too=False)
        except ShapeFailure:
            raise
        except Exception as error:  # the engine crashing on a legal shape is a failure too
            raise ShapeFailure(dict(values), seed, error) from None
        self.count += 1
        self.stats += stats

    def _screened(self, values: dict[str, int], seed: int, inputs: InputSet, run: InputRun) -> None:
        """Screen the shape in the child while eager makes its calls here, where the cores
        hold both; a crash is this shape's failure."""
        screening = self._screening([(inputs, run)], then=[])
        try:
            screening.finish()
        except AotiCheckError as error:
            self.crashed = ShapeFailure(dict(values), seed, error)
            raise self.crashed from None

    def attributed(self, failure: ShapeFailure) -> BaseException:
        """The failure of ``failure``'s shape again, with its stage and node (a crash is
        never run again: it would end the test process)."""
        if failure is self.crashed or not isinstance(failure.error, AotiCheckError):
            return failure.error
        run = self._input_run(failure.values, failure.seed, attribute=True)
        try:
            run.check(self.calls, self.mutates, values_too=False)
        except AotiCheckError as error:
            return error
        return failure.error  # did not fail again: report what the search saw


def _describe_shapes(shapes: ProgramShapes, values: Mapping[str, int]) -> str:
    """``x=(3, 8), y=(3,)``: the concrete shape of every tensor input."""
    concrete = shapes.sizes_at(values)
    return ", ".join(f"{name}={tuple(shape)}" for name, shape in concrete.items())


def _report(
    failure: ShapeFailure, error: BaseException, shapes: ProgramShapes, generation: Generation
) -> Finding:
    """The finding of a generated shape: the shape and its dims first, then what differed
    there (the inner finding's stage, node and figures are kept)."""
    concrete = shapes.sizes_at(failure.values)
    dims = []
    for spec in shapes.inputs:
        for axis, (size, expr) in enumerate(zip(concrete[spec.name], spec.shape)):
            if isinstance(expr, str):
                low, high = shapes.dim_range(spec.name, axis)
                allowed = f"[{low}, {high if high is not None else 'inf'}]"
                dims.append(
                    f"{spec.name}.shape[{axis}] = {size}  "
                    f"({shapes.display(expr)}, exported range {allowed})"
                )

    rerun = failure.rerun
    if rerun is None:
        rerun = "found at an exported boundary (the search did not shrink it further)"
    elif generation.database is not None:
        rerun += " (the failing shape is also saved and tried first on the next run)"
    described = _describe_shapes(shapes, failure.values)
    what = "boundary shape" if failure.boundary else "generated shape"
    headline = f"{what} fails: {described}"
    # a replay seed only for a shape Hypothesis drew
    seed_line = (
        f"values seed {failure.seed}; {rerun}"
        if not failure.boundary
        else (f"at the exported boundary; values seed {failure.seed}")
    )
    shape_lines = (*dims, seed_line)
    extra = {
        "shape": {name: list(shape) for name, shape in concrete.items()},
        "boundary": failure.boundary,
    }
    if isinstance(error, ExportedRefusals.Refusal):
        details, notes = error.lines()

        return Finding(
            kind=SHAPE_KIND,
            location="",
            summary="",
            message=f"{what} refused by the exported program: {described}",
            details=(*shape_lines, *details),
            notes=tuple(notes),
            stage="export",
            extra={**extra, "assertion": error.assertion, "value_dependent": error.value_dependent},
        )
    if isinstance(error, AotiCheckError):
        inner = error.finding
        return replace(
            inner,
            kind=SHAPE_KIND,
            message=headline,
            details=(
                *shape_lines,
                f"first difference: {inner.headline(stage=False)}",
                *inner.details,
            ),
            extra={**inner.extra, **extra, "inner_kind": inner.kind.value},
        )
    first = str(error).splitlines()[0] if str(error) else ""
    return Finding.plain(
        "shape",
        "\n".join([headline, *shape_lines, f"first difference: {type(error).__name__}: {first}"]),
        extra=extra,
    )
