"""The weights check: after parity on the example, new weight sets (:mod:`.draws`) loaded into
the engine with ``load_constants(..., check_full_update=True)``, the engine compared with eager
holding the same weights through parity's path, and the engine's own weights loaded back.

It runs on the one engine, the shared one, and loads the compiled weights back when it is
done (checked: the engine answers the example as before): a second engine would load the
package again (a second copy of the weights, its library mapped for good), and the checks
after this one, and the test's own calls, get the engine as compiled. A program with buffer
state is left out: the engine's buffers are read back from a second instance of its library,
which holds the compiled weights.

A weight the engine cannot take is a finding (:mod:`.hazards`): one the program reads that is
not among the engine's constants (folded into the compiled code), one ``load_constants``
refuses, and one it accepts and the engine does not follow: where the swap of every weight
differs from eager, the weights the engine lists are narrowed down by halves to those whose
swap alone differs.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from pytest_aoti.api import (
    AotiCheckError,
    CheckContext,
    CheckPlan,
    Comparison,
    Finding,
    InputBuilder,
    InputReplay,
    InputRun,
    Outcome,
    Phase,
    RecordPart,
)
from pytest_aoti.weights.draws import (
    Weight,
    draw_set,
    module_holding,
    module_weights,
    used_names,
    weight_seed,
    with_values,
)
from pytest_aoti.weights.feature import WEIGHTS_KIND, WeightsOptions
from pytest_aoti.weights.hazards import (
    DIFFERS,
    FOLDED,
    IGNORED,
    REFUSED,
    RUNTIME_FOLDING,
    UNSUPPLIED,
    failure_text,
)

if TYPE_CHECKING:
    from pytest_aoti.api import AotiProgram

SETS = 3
"""Weight sets a check compares (a large program's only with ``weights="swap"`` or
``budget="off"``: :data:`SERVED`)."""
STATEFUL = (
    "the program mutates registered buffers, whose state is read back from a second "
    "instance of the engine's library, which keeps the compiled weights"
)
SERVED = (
    "a large program (32 MiB or more of weights and example): a swap would load it a "
    "second time and hold two more copies of its weights (the engine's swapped ones and "
    "eager's), beyond the check budget; weights='swap' or budget='off' swaps them"
)


class WeightsCheck:
    """New weight sets loaded into the engine, each compared with eager holding them."""

    name = "weights"
    figures: tuple[str, ...] = ()
    phase: Phase = "engine"

    def applies(self, plan: CheckPlan, context: CheckContext) -> bool:
        if plan.options.of(WeightsOptions).weights == "off" or context.random_ops:
            return False  # a random program's values cannot match
        exported = getattr(context.compiled, "exported", None)
        if exported is None:
            return True
        signature = exported.graph_signature  # a program without weights has none to swap
        return bool(signature.inputs_to_parameters or signature.inputs_to_buffers)

    def run(self, plan: CheckPlan, context: CheckContext) -> Outcome:
        __tracebackhide__ = True
        swap = _Swap(plan, context)
        swap.run()
        part = swap.part()
        if part["findings"] and swap.mode == "swap":
            finding = Finding.plain(
                WEIGHTS_KIND,
                failure_text(part),
                location="weights",
                tolerance=swap.difference_tolerance,  # the repro bundle's, where one differed
                extra={"weights": part},
                record_fields={"weights": part},
            )
            error = AotiCheckError(finding)
            error.replay = swap.replay()
            raise error
        record = RecordPart({"weights": part})
        return Outcome(stats=tuple(swap.stats), input_sets=swap.ran, record=record)


class _Engine:
    """The engine's constants: loads that answer with the refusal, and what was loaded."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.loaded: set[str] = set()

    def refusal(self, values: Mapping[str, torch.Tensor], *, full: bool = False) -> str | None:
        """Load ``values``; None, or the loader's error in one line."""
        try:
            self.engine.load_constants(_compact(values), check_full_update=full)
        except Exception as error:  # the loader's RuntimeError, in torch's words
            lines = str(error).strip().splitlines() or [type(error).__name__]
            return next((line for line in lines if "Constant" in line), lines[0])[:200]
        self.loaded.update(values)
        return None

    def restore(self, originals: Mapping[str, torch.Tensor]) -> None:
        """Load the compiled value of every constant loaded so far."""
        back = {name: originals[name] for name in self.loaded if name in originals}
        if back:
            self.engine.load_constants(_compact(back), check_full_update=False)


class _Swap:
    """The weight sets of one check, in order; the first finding ends them."""

    def __init__(self, plan: CheckPlan, context: CheckContext) -> None:
        self.plan = plan
        self.context = context
        self.program: AotiProgram = context.program
        self.mode = plan.options.of(WeightsOptions).weights
        self.example = plan.input_sets[0]
        self.findings: list[dict[str, Any]] = []
        self.stats: list[Any] = []
        self.ran = 0
        self.refused_sets = 0
        self.stopped = ""
        self.skipped = ""
        self.difference: dict[str, Any] | None = None
        self.difference_tolerance: dict[str, Any] | None = None
        self.narrowing_runs = 0
        self.seconds = 0.0
        self.weights: list[Weight] = []
        self.unread: list[Weight] = []
        """Weights the program never reads: a full update still names those the engine lists."""
        self.kept: Counter[str] = Counter()
        self.fqns: list[str] = []
        self.engine: Any = None
        self.before: Any = None
        self._error_line = ""

    def run(self) -> None:
        __tracebackhide__ = True
        started = time.perf_counter()
        try:
            self._run()
        finally:
            self.seconds = time.perf_counter() - started

    def _run(self) -> None:
        __tracebackhide__ = True
        if self.program.mutated_buffers:
            self.skipped = STATEFUL
            return
        used = used_names(self.program.exported)
        if not used:
            self.stopped = "the program reads no weight"
            return
        if self.mode != "swap" and self.context.another_load_over_budget():
            self.skipped = SERVED
            self.context.budget.left_out("weights", SETS)
            return
        engine = self.context.local_engine()
        if not (hasattr(engine, "load_constants") and hasattr(engine, "get_constant_fqns")):
            self.skipped = f"this torch ({torch.__version__}) loads no constants into an engine"
            return
        self.engine = engine
        self.fqns = list(engine.get_constant_fqns())
        every = module_weights(self.plan.module, self.program.mutated_buffers)
        self.weights = [weight for weight in every if used & set(weight.names)]
        self.unread = [weight for weight in every if not used & set(weight.names)]
        self.kept = Counter(weight.kept for weight in self.weights if weight.kept)
        if not self.weights:
            self.stopped = "the program reads no weight"
            return
        constants = _Engine(engine)
        originals = self._originals()
        self.before = before = self._call()
        try:
            self._folded(constants)
            self._sets(constants, originals)
        finally:
            try:
                constants.restore(originals)
            except Exception as error:  # the engine keeps swapped weights: let go of it
                self.program.forget_engine()
                raise _not_restored(
                    f"load_constants raised {type(error).__name__}: {error}"
                ) from None
        self._check_restored(before)

    def _originals(self) -> dict[str, torch.Tensor]:
        """Every constant the engine lists that this check can name -> its compiled value:
        the module's weights, and the exported program's other constants."""
        values = with_values([*self.weights, *self.unread], {})
        constants = {**self.program.exported.constants, **values}
        return {
            name: value
            for name, value in constants.items()
            if name in self.fqns and isinstance(value, torch.Tensor)
        }

    def _folded(self, constants: _Engine) -> None:
        """A floating weight the program reads that is not among the engine's constants:
        folded into the code; asked with its own value, what the loader answers."""
        listed = set(self.fqns)
        for weight in self.weights:
            if not weight.tensor.dtype.is_floating_point or listed & set(weight.names):
                continue
            error = constants.refusal({weight.name: weight.tensor})
            self._found(weight, FOLDED, error=error or "", unmeasured=_unmeasured(weight))

    def _sets(self, constants: _Engine, originals: Mapping[str, torch.Tensor]) -> None:
        __tracebackhide__ = True
        drawn = [weight for weight in self.weights if not weight.kept]
        if not drawn:
            self.stopped = "no weight to draw"
            return
        budget = self.context.budget
        budget.plan("weights", SETS, given=True)  # all or none: decided above
        index = 0
        while index < SETS:
            new = draw_set(drawn, weight_seed(self.context.label, self.program.key, index))
            try:
                self._set(index, new, constants, originals)
            except InputRun.EagerRaised:  # the module itself refuses these weights: not a finding
                self.refused_sets += 1
            index += 1
            if self.findings:
                self.stopped = "a finding"
                break
        budget.ran("weights", index)

    def _set(
        self,
        index: int,
        new: Mapping[str, torch.Tensor],
        constants: _Engine,
        originals: Mapping[str, torch.Tensor],
    ) -> None:
        """Weight set ``index``: every weight the engine lists loaded at once, the engine
        compared with eager holding every drawn weight; a difference narrowed down."""
        __tracebackhide__ = True
        listed = set(self.fqns)
        refused = {found["weight"] for found in self.findings if found["reason"] == REFUSED}
        candidates = [
            weight
            for weight in self.weights
            if not weight.kept and listed & set(weight.names) and weight.name not in refused
        ]
        accepted = self._load_set(new, candidates, constants, originals)
        error = self._differs(index, with_values(self.weights, new))
        self.ran += 1
        if error is None:
            return
        figures = error.finding.figures
        self._error_line = error.finding.headline(stage=False)
        self.difference = {
            "set": index,
            "kind": error.finding.kind.value,
            "max_abs": None if figures is None else figures.max_abs,
            "location": error.finding.location,
        }
        self.difference_tolerance = error.finding.tolerance
        folded = {found["weight"] for found in self.findings if found["reason"] == FOLDED}
        if folded & set(new):  # the listed weights alone: the folded ones may explain it all
            listed_only = [weight.name for weight in accepted]
            if self._differs(index, with_values(self.weights, new, listed_only)) is None:
                return
        if accepted:  # the engine back to its compiled weights, then narrowed by groups
            constants.refusal(_group(accepted, None, listed))
            self._narrow(index, new, accepted, constants)

    def _load_set(
        self,
        new: Mapping[str, torch.Tensor],
        candidates: Sequence[Weight],
        constants: _Engine,
        originals: Mapping[str, torch.Tensor],
    ) -> list[Weight]:
        """Load the set as a server would, every constant at once with a full update; the
        weights the engine took. A refused full update is narrowed down: constants no state
        dict holds, or each weight's new value alone."""
        listed = set(self.fqns)
        values = dict(originals)
        for weight in candidates:
            values.update(_named(weight, new[weight.name], listed))
        error = constants.refusal(values, full=True)
        if error is None:
            return list(candidates)
        if constants.refusal(values) is None:  # every value taken: names it lacks
            reported = {found["weight"] for found in self.findings}
            for name in sorted(listed - set(originals) - reported):
                self.findings.append({"weight": name, "reason": UNSUPPLIED, "error": error})
            return list(candidates)
        accepted = []
        for weight in candidates:
            refusal = constants.refusal(_named(weight, new[weight.name], listed))
            if refusal is None:
                accepted.append(weight)
            else:
                self._found(weight, REFUSED, error=refusal)
        return accepted

    def _narrow(
        self,
        index: int,
        new: Mapping[str, torch.Tensor],
        accepted: Sequence[Weight],
        constants: _Engine,
    ) -> None:
        """The weights whose swap alone differs from eager: halves of ``accepted`` tried in
        turn, each alone in the engine and in eager (the others compiled); each found is
        ignored where the engine's answer did not move with it."""
        found = 0
        whole = list(accepted)
        queue = [whole]
        while queue:  # a failure: narrowed down whatever it costs
            group = queue.pop(0)
            if group is whole and len(group) > 1:
                queue += _halves(group)  # the whole set is known to differ
                continue
            differs, moved = self._group_differs(index, new, group, constants)
            if differs and len(group) == 1:
                found += 1
                self._found(group[0], DIFFERS if moved else IGNORED)
            elif differs:
                queue += _halves(group)
        if not found:  # only together
            self.findings.append(
                {
                    "weight": f"weight set {index}",
                    "reason": DIFFERS,
                    "error": self._error_line or "",
                    "together": True,
                }
            )

    def _group_differs(
        self,
        index: int,
        new: Mapping[str, torch.Tensor],
        group: Sequence[Weight],
        constants: _Engine,
    ) -> tuple[bool, bool]:
        """Whether the swap of ``group`` alone differs from eager, and (for one weight)
        whether the engine's answer moved with it."""
        listed = set(self.fqns)
        self.narrowing_runs += 1
        constants.refusal(_group(group, new, listed))
        try:
            names = [weight.name for weight in group]
            differs = self._differs(index, with_values(self.weights, new, names)) is not None
            moved = differs and len(group) == 1 and not Comparison.same(self.before, self._call())
            return differs, moved
        except InputRun.EagerRaised:
            return False, False
        finally:
            constants.refusal(_group(group, None, listed))

    def _differs(self, index: int, values: Mapping[str, torch.Tensor]) -> AotiCheckError | None:
        """The engine as loaded now against eager holding ``values``, through parity's path
        (no triage: the exported program holds the compiled weights); its error, or None."""
        __tracebackhide__ = True
        args, kwargs = self.example
        run = InputRun(
            self.program,
            module_holding(self.plan.module, values),
            args,
            kwargs,
            tolerance=self.plan.tolerance,
            label=f"weight set {index}",
            triage=None,
            attribute=False,
            engine=lambda: self.engine,
        )
        try:
            stats = run.check(self.context.calls, None, values_too=False, eager_refusals=True)
        except AotiCheckError as error:
            return error
        self.stats += stats
        return None

    def replay(self) -> InputReplay | None:
        """What the repro bundle replays: the example, on eager and the engine holding the
        set that differed (drawn again when the bundle asks); None where no set differed
        (the bundle would replay the compiled weights)."""
        if self.difference is None:
            return None
        weights = self.weights
        drawn = [weight for weight in weights if not weight.kept]
        seed = weight_seed(self.context.label, self.program.key, self.difference["set"])

        def weight_set() -> dict[str, torch.Tensor]:
            new = draw_set(drawn, seed)
            return {name: new[weight.name] for weight in drawn for name in weight.names}

        args, kwargs = self.example
        return InputReplay(
            self.plan.module, tuple(args), dict(kwargs), self.context.calls, weight_set
        )

    def _call(self) -> Any:
        """The engine's outputs on a clone of the example."""
        args, kwargs = InputBuilder.clone_tree(self.example)
        with torch.no_grad():
            return InputBuilder.clone_tree(self.engine(*args, **kwargs))

    def _check_restored(self, before: Any) -> None:
        """Raise where the engine, given its compiled weights back, answers otherwise."""
        __tracebackhide__ = True
        try:
            Comparison(self.plan.tolerance).trees(before, self._call(), what="output")
        except AotiCheckError as error:
            self.program.forget_engine()  # later tests get the package loaded again
            raise _not_restored(error.finding.headline(stage=False)) from None

    def _found(self, weight: Weight, reason: str, **fields: Any) -> None:
        found: dict[str, Any] = {"weight": weight.name, "reason": reason}
        if len(weight.names) > 1:
            found["names"] = list(weight.names)
        found.update((key, value) for key, value in fields.items() if value)
        self.findings.append(found)

    def part(self) -> dict[str, Any]:
        """The record's ``weights`` field."""
        part: dict[str, Any] = {"mode": self.mode, "seconds": round(self.seconds, 4)}
        if self.skipped:
            return {**part, "skipped": self.skipped, "findings": []}
        return {
            **part,
            "planned": SETS,
            "ran": self.ran,
            "refused_sets": self.refused_sets,
            "stopped": self.stopped,
            "swapped": sum(1 for weight in self.weights if not weight.kept),
            "kept": dict(sorted(self.kept.items())),
            "constants": len(self.fqns),
            "findings": self.findings,
            "difference": self.difference,
            "narrowing_runs": self.narrowing_runs,
            "runtime_folding": bool(self.plan.inductor_configs.get(RUNTIME_FOLDING)),
        }


def _named(weight: Weight, value: torch.Tensor, listed: set[str]) -> dict[str, torch.Tensor]:
    """``value`` under each of the weight's names the engine lists."""
    return {name: value for name in weight.names if name in listed}


def _not_restored(detail: str) -> AotiCheckError:
    return AotiCheckError(
        Finding.plain(
            WEIGHTS_KIND,
            "weight swap: the engine does not answer as before once its compiled weights are "
            f"loaded back with load_constants\n{detail.splitlines()[0] if detail else ''}",
            location="weights",
        )
    )


def _compact(values: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``values`` with each tensor that is a view into a larger storage (a slice of another
    weight) copied into one of its own: the loader copies a constant's whole storage."""
    return {
        name: tensor
        if tensor.storage_offset() == 0
        and tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()
        else torch.empty_strided(
            tensor.shape, tensor.stride(), dtype=tensor.dtype, device=tensor.device
        ).copy_(tensor)
        for name, tensor in values.items()
    }


def _group(
    group: Sequence[Weight], new: Mapping[str, torch.Tensor] | None, listed: set[str]
) -> dict[str, torch.Tensor]:
    """The weights of ``group`` under the names the engine lists: their ``new`` values
    (None: their compiled ones)."""
    values: dict[str, torch.Tensor] = {}
    for weight in group:
        values.update(_named(weight, weight.tensor if new is None else new[weight.name], listed))
    return values


def _halves(group: list[Weight]) -> list[list[Weight]]:
    middle = len(group) // 2
    return [group[:middle], group[middle:]]


def _unmeasured(weight: Weight) -> str:
    return f"its values are {weight.kept}" if weight.kept else ""
