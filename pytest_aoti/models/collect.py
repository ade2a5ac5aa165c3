"""The tests of ``--aoti-model`` specs: a virtual module under the session, no test file.

:func:`resolve_specs` resolves each spec at startup (factories in ``models.model_spec``;
``hf:``, ``timm:``, ``torchvision:`` through ``models.prefixes``); :func:`register` adds the
plugin that collects their tests.

The module ``aoti-model`` holds one test function, ``test_model``, parametrized by spec; the
plugin parametrizes it by device and export variant as any AOTI test, so the ``aoti``
fixture, reports, ``-k``, ``--lf``, ``--deselect`` and xdist treat it as ordinary tests:
``aoti-model::test_model[hf:bert-cpu]``.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Generator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from _pytest.main import wrap_session

from pytest_aoti.models.feature import parse_model_spec
from pytest_aoti.models.model_spec import ModelSpec, clean_id, make_importable, resolve_factory
from pytest_aoti.models.prefixes import resolver_of

if TYPE_CHECKING:
    from pytest_aoti.api import AotiTester

PLUGIN_NAME = "aoti-model-specs"
MODULE_ID = "aoti-model"
_SPEC_ARG = "aoti_model_spec"


def test_model(aoti: AotiTester, aoti_model_spec: ModelSpec) -> None:
    """The spec's factory called (seeded) for this device, then the full default check."""
    __tracebackhide__ = True
    if aoti_model_spec.run is not None:  # another plugin's spec (golden:): its own test
        aoti_model_spec.run(aoti)
        return
    # factories imports torch: this module loads at startup, where specs resolve
    from pytest_aoti.models.factories import call_factory

    case = call_factory(
        aoti_model_spec.factory,
        aoti.device,
        aoti_model_spec.label,
        aoti.defaults.catalog.check_keywords(),
    )
    aoti.check(case.module, case.args, case.kwargs, **case.check)


class SpecModule(pytest.Module):
    """A module object made in memory: nothing to import, no file on disk."""

    specs: list[ModelSpec]

    def _getobj(self) -> types.ModuleType:
        module = types.ModuleType("pytest_aoti_models")
        module.test_model = test_model  # type: ignore[attr-defined]
        specs = self.specs

        def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
            # a module's own hook runs before the plugin's: the spec leads the test id
            metafunc.parametrize(_SPEC_ARG, specs, ids=[spec.id for spec in specs])

        module.pytest_generate_tests = pytest_generate_tests  # type: ignore[attr-defined]
        return module


class ModelSpecs:
    """Resolved specs; adds their module to the session's collection."""

    def __init__(self, specs: list[ModelSpec]) -> None:
        self.specs = specs

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(
        self, collector: pytest.Collector
    ) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
        report = yield
        if isinstance(collector, pytest.Session) and self.specs and report.passed:
            # its path is the rootdir, which exists: --lf keeps it among the paths it knows
            module = SpecModule.from_parent(
                collector, path=collector.config.rootpath, name=MODULE_ID, nodeid=MODULE_ID
            )
            module.specs = self.specs
            report.result.append(module)
        return report


def resolve_specs(
    texts: Sequence[str],
    rootpath: Path,
    invocation_dir: Path,
    prefixes: Mapping[str, Callable[[str, Path], Any]] | None = None,
) -> list[ModelSpec]:
    """Every spec resolved, in order; raises ``pytest.UsageError`` for the first that is not.
    ``prefixes``: other plugins' spec prefixes and their resolvers (each returns its tests as
    ``(test id, function of the aoti fixture)``), from
    :func:`~pytest_aoti.hookspecs.pytest_aoti_model_prefixes`."""
    make_importable(rootpath, invocation_dir)
    specs: list[ModelSpec] = []
    for text in texts:
        added = next(
            (resolve for prefix, resolve in (prefixes or {}).items() if text.startswith(prefix)),
            None,
        )
        if added is not None:  # each of its tests runs the plugin's function
            specs.extend(
                ModelSpec(text, clean_id(test_id), _no_factory, run=run)
                for test_id, run in added(text, rootpath)
            )
            continue
        try:
            parse_model_spec(text, strict=True)
        except Exception as error:  # argparse.ArgumentTypeError from an ini line
            raise pytest.UsageError(f"--aoti-model={text}: {error}") from None
        resolver = resolver_of(text)
        if resolver is not None:
            specs.append(resolver(text, rootpath))
        else:
            specs.extend(resolve_factory(text, rootpath))
    return specs


def _no_factory() -> Any:
    raise TypeError("this spec's test is its plugin's own function: it has no module factory")


def plugin_prefixes(config: pytest.Config) -> dict[str, Callable[[str, Path], Any]]:
    """The spec prefixes other plugins add, merged (the first plugin's resolver wins)."""
    merged: dict[str, Callable[[str, Path], Any]] = {}
    for prefixes in config.hook.pytest_aoti_model_prefixes(config=config):
        for prefix, resolve in dict(prefixes or {}).items():
            merged.setdefault(prefix, resolve)
    return merged


def register(config: pytest.Config, texts: tuple[str, ...]) -> ModelSpecs:
    """Resolve ``texts`` (a usage error for one that does not resolve) and add the plugin.

    ``--aoti-model`` on the command line with no path argument collects the specs alone:
    the user asked for those models, not for the suite under ``testpaths`` or the current
    directory. Paths given: both. Specs from the ini ``aoti_models`` join the usual
    collection."""
    specs = resolve_specs(
        texts, config.rootpath, config.invocation_params.dir, plugin_prefixes(config)
    )
    if config.getoption("aoti_model") and config.args_source is not pytest.Config.ArgsSource.ARGS:
        # xdist workers get the same command line and decide the same
        config.args = []
    plugin = ModelSpecs(specs)
    config.pluginmanager.register(plugin, PLUGIN_NAME)
    return plugin


def list_specs(config: pytest.Config, session: pytest.Session) -> int:
    """``--aoti-models-list``: every spec's test, its module class and inputs' shapes."""
    # torch loads on first use: this module loads at startup, where specs resolve
    import torch

    from pytest_aoti.api import session_of
    from pytest_aoti.models.factories import call_factory, describe_inputs

    options = session_of(config).catalog.check_keywords()

    plugin = config.pluginmanager.get_plugin(PLUGIN_NAME)
    specs: list[ModelSpec] = plugin.specs if isinstance(plugin, ModelSpecs) else []
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    write = reporter.write_line if reporter is not None else print
    if not specs:
        write("no model specs: pass --aoti-model=SPEC or set aoti_models in the ini file")
        return 0
    failed = False
    for spec in specs:
        try:
            case = call_factory(spec.factory, torch.device("cpu"), spec.label, options)
        except Exception as error:
            failed = True
            write(f"{spec.id}: the factory failed: {type(error).__name__}: {error}")
            continue
        line = f"{spec.id}: {type(case.module).__name__}({describe_inputs(case)})"
        rule = getattr(spec.factory, "input_rule", None)  # timm:, torchvision: say which size
        write(f"{line}; input: {rule}" if rule else line)
    return 1 if failed else 0


def list_main(config: pytest.Config) -> int:
    """Run :func:`list_specs` in a configured session, with no xdist workers."""
    option = config.option
    if hasattr(option, "numprocesses"):
        option.numprocesses, option.dist, option.tx = 0, "no", []
    return int(wrap_session(config, list_specs))
