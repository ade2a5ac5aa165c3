"""The object behind the ``aoti`` fixture: a thin front whose calls are resolved into one
frozen :class:`~pytest_aoti.checks.base.CheckPlan` and run by the
:class:`~pytest_aoti.run.runner.CallRunner`."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_aoti.checks.base import CheckResult
from pytest_aoti.errors import user_facing
from pytest_aoti.options import keywords
from pytest_aoti.options.defaults import CheckDefaults
from pytest_aoti.run.added import PluginChecks
from pytest_aoti.run.resolve import resolve_call
from pytest_aoti.run.runner import CallRunner, CheckEvents

if TYPE_CHECKING:
    import pytest
    import torch

    from pytest_aoti.cache.registry import ProgramRegistry
    from pytest_aoti.compiling.program import AotiProgram


__all__ = ["AotiTester", "CheckDefaults", "CheckEvents", "CheckResult"]

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
        defaults: CheckDefaults | None = None,
        *,
        events: CheckEvents | None = None,
        hypothesis_database: Path | None = None,
        label: str = "",
        warned: set[str] | None = None,
        item: pytest.Item | None = None,
        plugin_checks: PluginChecks | None = None,
    ) -> None:
        self.device = device  # every module and input is moved to it
        # made without the fixture, outside a run: every default plugin's options and checks
        if defaults is None:
            from pytest_aoti.plugins import default_catalog

            defaults = CheckDefaults(catalog=default_catalog())
        if plugin_checks is None:
            from pytest_aoti.plugins import default_checks

            plugin_checks = default_checks()
        self.defaults = defaults
        self._runner = CallRunner(
            device,
            registry,
            events=events,
            hypothesis_database=hypothesis_database,
            label=label,
            warned=warned,
            item=item,
            plugin_checks=plugin_checks,
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

        The same program (graph, weights, configs, device, torch) is compiled once per
        session, and once across sessions while the cache holds it. An unknown keyword is a
        usage error that names the closest ones.
        """
        __tracebackhide__ = True
        keywords.refuse_unknown(keywords.COMPILE, unknown, self.defaults.catalog)
        options = {"strict": strict, "inductor_configs": inductor_configs}
        plan = resolve_call(
            self.defaults,
            self.device,
            module,
            args,
            kwargs,
            dynamic_shapes=dynamic_shapes,
            options=options,
        )
        return self._runner.compile(plan)

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
        steps: int | None = None,
        next_inputs: Callable[[Any, tuple[Any, ...], dict[str, Any]], Any] | None = None,
        **options: Any,
    ) -> CheckResult:
        """Compile ``module`` and assert the engine matches eager PyTorch.

        Eager runs the example first (stage ``"eager"``), then the program is exported,
        compiled and checked: parity of every output, mutated input and mutated buffer after
        each of ``calls`` calls (default one; two with buffer state); untouched inputs stay
        so; aliased examples again as distinct tensors; with dynamic dims, boundary and
        generated shapes; then the deployment probes.

        - ``mutates={"x": expected}``: the program mutates exactly these inputs, writing
          ``expected`` (or a callable of the original inputs) in place, after the last
          explicit call, else the first; ``mutates={}``: none;
        - ``mutated_buffers={"counter"}``: the program mutates exactly these buffers;
        - ``samples=[args2, ...]``: more input tuples for the same program;
        - ``dynamic_shapes``: a torch.export spec, or ``"auto"`` to infer it from the samples;
        - ``steps=N, next_inputs=fn``: a decode loop of ``N`` calls, the first on the example,
          each next one on ``fn(outputs, args, kwargs) -> (args, kwargs)`` of the last; eager
          and the engine each feed their own chain, compared at every step (not with
          ``calls``);
        - ``**options``: ``rtol``, ``atol``, ``strict``, ``inductor_configs`` and the
          :class:`~pytest_aoti.api.CheckOptions` keywords (the options page lists them),
          over the marker and the command line. An unknown keyword is a usage error.

        Tensors passed in are never modified. Raises :class:`~pytest_aoti.AotiCheckError` on
        the first difference, with its stage (``.stage``) and diverging node (``.node``).
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
            steps=steps,
            next_inputs=next_inputs,
            options=options,
        )
        return self._runner.check(plan, started)
