"""The session's side of one test's tester (:class:`~pytest_aoti.run.runner.CheckEvents`):
records, JUnit properties, repro bundles, the ``pytest_aoti_check_done`` hook."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from pytest_aoti.findings import FindingKind
from pytest_aoti.reports.junit import check_properties, compile_properties
from pytest_aoti.reports.records import CheckRecord, CompileRecord

if TYPE_CHECKING:
    from pathlib import Path

    import pytest
    import torch

    from pytest_aoti.cache.registry import ProgramRegistry
    from pytest_aoti.checks.base import CheckContext, CheckPlan, CheckResult, Triage
    from pytest_aoti.compiling.program import AotiProgram
    from pytest_aoti.errors import AotiCheckError
    from pytest_aoti.options.catalog import Catalog
    from pytest_aoti.reports.collector import ReportCollector


class EventsHost(Protocol):
    """What :class:`ItemEvents` needs of the session."""

    config: pytest.Config
    collector: ReportCollector
    catalog: Catalog

    @property
    def worker(self) -> str: ...

    def bundle_dir(self, item: pytest.Item) -> Path | None: ...

    def profile_path(self, item: pytest.Item) -> Path | None: ...

    def record_inferred(self, item: pytest.Item, spec_text: str) -> None: ...

    def observe_key(self, item: pytest.Item, check: int, program: AotiProgram) -> None: ...

    def note_served(self, item: pytest.Item, key: str | None) -> None: ...


class ItemEvents:
    """Records what one test's tester did: a record per check and per compile."""

    def __init__(self, session: EventsHost, item: pytest.Item, device: torch.device) -> None:
        self._session, self._item, self._device = session, item, device
        self._checks = self._programs = 0
        self._notes: list[str] = []
        self._layout = ""  # the layout the running check's example is relaid in

    def _used(self, program: AotiProgram) -> None:
        """Number each program the test uses, to compare its key with last run's."""
        self._programs += 1
        self._session.observe_key(self._item, self._programs, program)

    def compiled(self, program: AotiProgram) -> None:
        self._used(program)
        record = CompileRecord(
            test=self._item.nodeid,
            device=str(self._device),
            program=program.key,
            cache_hit=program.cache_hit,
            compile_seconds=program.seconds_compiled_here,
            original_compile_seconds=program.compile_seconds,
            worker=self._session.worker,
            source=program.source,
        )
        self._session.collector.compiles.append(record)
        self._item.user_properties.extend(compile_properties(record))

    def not_compiled(self, error: Exception, seconds: float) -> None:
        stage = getattr(error, "stage", None) or "compile"
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        finding = getattr(error, "finding", None)  # eager and random failures have one
        record = CheckRecord(
            test=self._item.nodeid,
            device=str(self._device),
            program="",
            cache_hit=False,
            compile_seconds=0.0,
            original_compile_seconds=0.0,
            outcome="failed",
            finding=finding.to_json()
            if finding is not None
            else {"kind": FindingKind(stage).value, "message": first, "stage": stage},
            check_seconds=seconds,
            other_fields=self._session.catalog.record_fields(),
        )
        if finding is not None:
            record.update(finding.record_fields)  # what the check measured until it failed
        self._add(record)

    def note(self, message: str) -> None:
        """Into this check's record and, once, the summary (a warning may be an error)."""
        self._notes.append(message)
        self._session.collector.note(message)

    def checked(
        self,
        program: AotiProgram,
        result: CheckResult | None,
        error: AotiCheckError | None,
        context: CheckContext,
        seconds: float,
    ) -> None:
        self._used(program)
        if error is None and not self._layout:  # the next run preloads the test's own program
            calls = context.engine_calls()
            served = calls is not None and calls["served"] > 0
            self._session.note_served(self._item, program.key if served else None)
        record = CheckRecord(
            test=self._item.nodeid,
            device=str(self._device),
            program=program.key,
            cache_hit=program.cache_hit,
            source=program.source,
            compile_seconds=program.seconds_compiled_here,
            original_compile_seconds=program.compile_seconds,
            outcome="passed" if error is None else "failed",
            calls=context.calls,
            check_seconds=seconds,
            other_fields=self._session.catalog.record_fields(),
        )
        if result is not None:
            record.max_abs = result.max_abs
            record.max_rel = result.max_rel
            record.tolerance_used = max(
                (leaf.tolerance_used for _, leaf in result.stats), default=0.0
            )
            record.fp64_rescued = any(leaf.rescued_by_fp64 for _, leaf in result.stats)
            record.shapes_tried = result.input_sets
            # what each check adds to the record: its figures, notes and properties
            record.update(result.record.fields)
            for note in result.record.notes:
                self.note(note)
            self._item.user_properties.extend(result.record.properties)
        if error is not None:
            record.finding = error.finding.to_json()
            record.update(error.finding.record_fields)  # what the check measured until it failed
            figures = error.finding.figures
            if figures is not None:
                record.max_abs, record.max_rel = figures.max_abs, figures.max_rel
        self._add(record)
        if result is not None:
            self._session.config.hook.pytest_aoti_check_done(item=self._item, result=result)

    @contextlib.contextmanager
    def in_layout(self, layout: str) -> Iterator[None]:
        """The records made inside name ``layout``, and share the check's index: they are
        one ``aoti.check``, run again on a program compiled from the relaid example."""
        self._layout = layout
        try:
            yield
        finally:
            self._layout = ""

    def profile_path(self) -> Path | None:
        return self._session.profile_path(self._item)

    def built(self, program: AotiProgram, module: str) -> None:
        from pytest_aoti.reports.cost_hints import COMPILED_HERE, CompiledHere

        compiled = self._item.stash.setdefault(COMPILED_HERE, [])
        compiled.append(CompiledHere(module, program.key_parts, program.seconds_compiled_here))

    def triage(
        self,
        program: AotiProgram,
        plan: CheckPlan,
        *,
        registry: ProgramRegistry,
        device: torch.device,
        label: str,
    ) -> Triage | None:
        result: Triage | None = self._session.config.hook.pytest_aoti_triage(
            program=program, plan=plan, registry=registry, device=device, label=label
        )
        return result

    def failed(self, program: AotiProgram, error: AotiCheckError) -> str | None:
        line: str | None = self._session.config.hook.pytest_aoti_failure_bundle(
            program=program,
            error=error,
            bundle_dir=lambda: self._session.bundle_dir(self._item),
            features=self._session.catalog.features,
        )
        return line

    def inferred(self, spec_text: str) -> None:
        self._session.record_inferred(self._item, spec_text)

    def _add(self, record: CheckRecord) -> None:
        if not self._layout:
            self._checks += 1
        record.notes, self._notes = self._notes, []
        record.check_index = self._checks
        record.layout = self._layout
        record.worker = self._session.worker
        self._session.collector.records.append(record)
        self._item.user_properties.extend(check_properties(record, self._session.catalog))
