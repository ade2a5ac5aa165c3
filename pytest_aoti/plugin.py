"""pytest glue: options, marker, device parametrization, fixtures. No torch at import time."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_aoti import hookspecs
from pytest_aoti.devices import asks_for_cuda
from pytest_aoti.isolation.process import preload_engine, prestart_engine_child
from pytest_aoti.options.catalog import Catalog
from pytest_aoti.options.resolve import checked
from pytest_aoti.options.settings import read_settings
from pytest_aoti.options.table import add_options, core_rows
from pytest_aoti.plugins import blocked_keywords, features_in_order, register_defaults
from pytest_aoti.reports.events import ItemEvents
from pytest_aoti.reports.xdist import XdistControllerHooks
from pytest_aoti.session import SESSION_KEY, SESSION_PLUGIN, AotiSession, session_of
from pytest_aoti.session_garbage import undo_freeze_after_pytest
from pytest_aoti.tester import AotiTester

if TYPE_CHECKING:
    import torch

_DEVICE_FIXTURE = "aoti_device"
_EXPORT_FIXTURE = "aoti_export_mode"


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    add_options(parser, core_rows())
    register_defaults(pluginmanager)  # each adds its own options as it registers, in order


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_configure(config: pytest.Config) -> None:
    undo_freeze_after_pytest(config)
    manager = config.pluginmanager
    catalog = Catalog(features_in_order(manager), blocked=blocked_keywords(manager))
    config.addinivalue_line("markers", catalog.marker_help())
    session = AotiSession(config, read_settings(config, catalog), catalog)
    if asks_for_cuda(session.settings.devices):
        # now: a missing GPU asked on the command line is a usage error (the ini's skips)
        session.devices  # noqa: B018
    session.stores.check_cache_dir()
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, SESSION_PLUGIN)
    if config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(XdistControllerHooks(session.collector), "aoti-xdist")


def _is_aoti_test(metafunc: pytest.Metafunc) -> bool:
    return (
        metafunc.definition.get_closest_marker("aoti") is not None
        or "aoti" in metafunc.fixturenames
        or _DEVICE_FIXTURE in metafunc.fixturenames
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run every AOTI test once per ``--aoti-device``, with the device in the test id."""
    if not _is_aoti_test(metafunc):
        return
    if any(
        _DEVICE_FIXTURE in marker.args[0]
        for marker in metafunc.definition.iter_markers("parametrize")
        if marker.args
    ):
        return  # the test parametrizes its device itself
    if _DEVICE_FIXTURE not in metafunc.fixturenames:
        metafunc.fixturenames.append(_DEVICE_FIXTURE)
    session = session_of(metafunc.config)
    devices = [
        *session.devices,
        *(
            pytest.param(name, marks=pytest.mark.skip(reason=reason))
            for name, reason in session.skipped_devices.items()
        ),
    ]
    ids = [*session.devices, *session.skipped_devices]
    metafunc.parametrize(_DEVICE_FIXTURE, devices, indirect=True, ids=ids)
    modes = session.settings.export_modes
    if modes != ("default",):
        # like PyTorch's own export tests: one test, a strict and a non-strict variant
        if _EXPORT_FIXTURE not in metafunc.fixturenames:
            metafunc.fixturenames.append(_EXPORT_FIXTURE)
        metafunc.parametrize(_EXPORT_FIXTURE, modes, indirect=True, ids=list(modes))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses the ``aoti`` fixture is an AOTI test (``-m aoti``) even unmarked."""
    for item in items:
        if "aoti" in getattr(item, "fixturenames", ()) and item.get_closest_marker("aoti") is None:
            item.add_marker(pytest.mark.aoti)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A marked test's marker options are checked also where the test does not use the
    ``aoti`` fixture (which checks them itself): a typo never passes silently."""
    __tracebackhide__ = True
    if "aoti" in getattr(item, "fixturenames", ()):
        return
    for marker in item.iter_markers("aoti"):
        checked(marker.kwargs, marker=True, catalog=session_of(item.config).catalog)


@pytest.fixture
def aoti_device(request: pytest.FixtureRequest) -> torch.device:
    """The ``torch.device`` this AOTI test runs on (one of ``--aoti-device``). Under
    ``pytest -n N``, ``cuda`` is worker ``gwI``'s own GPU: ``cuda:(I mod GPUs)``."""
    session = session_of(request.config)
    name = getattr(request, "param", None) or session.devices[0]
    return session.torch_device(name)


@pytest.fixture
def aoti_export_mode(request: pytest.FixtureRequest) -> str:
    """``strict``, ``non-strict`` or ``default``: this test's ``--aoti-export`` variant."""
    return str(getattr(request, "param", None) or "default")


@pytest.fixture
def aoti(
    request: pytest.FixtureRequest, aoti_device: torch.device, aoti_export_mode: str
) -> AotiTester:
    """Compiles modules to AOTInductor engines and checks them against eager PyTorch.

    ``aoti.compile(module, args)`` returns an :class:`~pytest_aoti.AotiProgram`;
    ``aoti.check(module, args, mutates=..., calls=..., samples=...)`` asserts parity,
    in-place mutations and the graph signature. Options of ``@pytest.mark.aoti(...)`` are
    the defaults of both.
    """
    __tracebackhide__ = True  # a wrong marker option shows its message, not our frames
    session = session_of(request.config)
    item = request.node
    defaults = session.defaults_for(item, aoti_device, aoti_export_mode)
    if aoti_device.type in ("cpu", "cuda"):
        package = session.stores.served_before(item.nodeid)
        if package is not None:  # the child's start and load overlap the model's build
            prestart_engine_child()
            preload_engine(package, aoti_device.index if aoti_device.type == "cuda" else None)
    return AotiTester(
        aoti_device,
        session.stores.registry,
        defaults,
        events=ItemEvents(session, item, aoti_device),
        hypothesis_database=session.stores.hypothesis_database(),
        label=item.nodeid,
        warned=session.warned_programs,
        item=item,
        plugin_checks=session.plugin_checks(),
    )
