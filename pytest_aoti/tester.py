"""The object behind the ``aoti`` fixture: ``compile()`` and ``check()``.

A thin front: a call is resolved (checked, its options layered, moved to the device) into
its one frozen :class:`~pytest_aoti.checks.base.CheckPlan` by
:func:`pytest_aoti.run.resolve.resolve_call` before anything is exported; the
:class:`~pytest_aoti.run.runner.CallRunner` then owns it from eager to result.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_aoti.checks.base import Check, CheckResult
from pytest_aoti.errors import user_facing
from pytest_aoti.options import keywords
from pytest_aoti.options.defaults import CheckDefaults
from pytest_aoti.run.resolve import resolve_call
from pytest_aoti.run.runner import CallRunner, CheckEvents

if TYPE_CHECKING:
    import pytest
    import torch

    from pytest_aoti.cache.registry import ProgramRegistry
    from pytest_aoti.compiling.program import AotiProgram


__all__ = ["AotiTester", "CheckDefaults", "CheckEvents", "CheckResult"]

_NO_DEFAULTS = CheckDefaults()

Expected = Any  # a tensor, nested list or number; or a callable of the original inputs


class AotiTester:
    """Compiles modules to AOTInductor engines and checks them against eager PyTorch.

    Use it through the ``aoti`` fixture::

        def test_scale(aoti):
            aoti.check(Scale(), (torch.randn(4, 8),))
    """

    def __init__(
        self,
        device: torch.device,
        registry: ProgramRegistry,
        defaults: CheckDefaults = _NO_DEFAULTS,
        *,
        events: CheckEvents | None = None,
        hypothesis_database: Path | None = None,
        label: str = "",
        warned: set[str] | None = None,
        item: pytest.Item | None = None,
        added_checks: Sequence[Check] = (),
    ) -> None:
        self.device = device
        """The ``torch.device`` every module and input is moved to."""
        self.defaults = defaults
        self._runner = CallRunner(
            device,
            registry,
            events=events,
            hypothesis_database=hypothesis_database,
            label=label,
            warned=warned,
            item=item,
            added_checks=added_checks,
        )

    def __repr__(self) -> str:
        return f"<AotiTester device={self.device}>"

    @user_facing
    def compile(
        self,
        module: torch.nn.Module,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any] | None = None,
        *,
        dynamic_shapes: Any = None,
        strict: bool | None = None,
        inductor_configs: Mapping[str, Any] | None = None,
        **unknown: Any,
    ) -> AotiProgram:
        """Export, decompose and AOT-compile ``module`` for :attr:`device` and load it.

        The same program (same graph, weights, configs, device and torch) is compiled once
        per session, and once across sessions while the artifact cache holds it. Any other
        keyword is a usage error that names the closest ones it takes.
        """
        __tracebackhide__ = True
        keywords.refuse_unknown(keywords.COMPILE, unknown)
        options = {"strict": strict, "inductor_configs": inductor_configs}
        plan = resolve_call(self.defaults, self.device, module, args, kwargs, options=options)
        return self._runner.compile(replace(plan, dynamic_shapes=dynamic_shapes))

    @user_facing
    def check(
        self,
        module: torch.nn.Module,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any] | None = None,
        *,
        mutates: Mapping[str, Expected] | None = None,
        mutated_buffers: Iterable[str] | None = None,
        calls: int | None = None,
        samples: Sequence[tuple[Any, ...]] | None = None,
        dynamic_shapes: Any = None,
        **options: Any,
    ) -> CheckResult:
        """Compile ``module`` and assert the engine matches eager PyTorch.

        Eager runs the example first (stage ``"eager"``), then the program is exported,
        compiled and checked: parity of every output, of every input it mutates and of every
        buffer it mutates, after each of ``calls`` calls (default one; two for a program with
        buffer state); inputs it does not mutate stay untouched; aliased examples are checked
        again as distinct tensors; with dynamic dims, boundary and ``examples`` generated
        shapes inside the exported ranges; then the deployment probes (``probes=``).

        - ``mutates={"x": expected}``: the program mutates exactly these inputs and the engine
          writes ``expected`` (or a callable of the original inputs) into the caller's tensor
          in place, after the last explicit call, else the first; ``mutates={}``: none;
        - ``mutated_buffers={"counter"}``: the program mutates exactly these buffers;
        - ``samples=[args2, ...]``: more input tuples for the same program;
        - ``dynamic_shapes``: a torch.export spec, or ``"auto"`` to infer it from the samples;
        - ``**options``: ``rtol``, ``atol``, ``strict``, ``inductor_configs`` and each field
          of :class:`~pytest_aoti.features.CheckOptions` that ``aoti.check`` takes
          (``examples``, ``values``, ``threads``, ...: the options page lists them all),
          checked before any export; they override the marker and the command line. An
          unknown keyword is a usage error that names the closest ones it takes.

        Tensors passed in are never modified. Raises :class:`~pytest_aoti.AotiCheckError` on
        the first difference, with the stage that introduced it (``.stage``) and, for the
        compile, the first diverging graph node (``.node``).
        """
        __tracebackhide__ = True
        started = time.perf_counter()
        plan = resolve_call(
            self.defaults,
            self.device,
            module,
            args,
            kwargs,
            samples=samples,
            dynamic_shapes=dynamic_shapes,
            mutates=mutates,
            mutated_buffers=mutated_buffers,
            calls=calls,
            options=options,
        )
        return self._runner.check(plan, started)
