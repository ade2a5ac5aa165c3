"""What must not move for users: the names ``pytest_aoti`` exports, the documented modules
``pytest_aoti.strategies`` and ``pytest_aoti.errors``, the ``pytest11`` entry point and
``-p pytest_aoti.plugin``. docs/how-it-is-built.md lists the same."""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from torch.export import Dim

import pytest_aoti

ROOT = Path(__file__).resolve().parents[2]

EXPORTED = {
    "AotiBufferMutationWarning",
    "AotiCacheWarning",
    "AotiCheckError",
    "AotiCompileError",
    "AotiError",
    "AotiExportError",
    "AotiInputError",
    "AotiProgram",
    "AotiTester",
    "AotiUsageError",
    "Check",
    "CheckContext",
    "CheckDefaults",
    "CheckPlan",
    "CheckResult",
    "Outcome",
}

ERRORS = {
    "AotiError": (Exception,),
    "AotiCheckError": (pytest_aoti.AotiError, AssertionError),
    "AotiExportError": (pytest_aoti.AotiError,),
    "AotiCompileError": (pytest_aoti.AotiError,),
    "AotiUsageError": (pytest_aoti.AotiError, TypeError),
    "AotiInputError": (pytest_aoti.AotiError, ValueError),
    "AotiBufferMutationWarning": (UserWarning,),
    "AotiCacheWarning": (UserWarning,),
}
"""The documented errors and warnings, with the built-in classes users catch them by."""


def test_package_exports_its_names() -> None:
    assert set(pytest_aoti.__all__) == EXPORTED
    for name in EXPORTED:
        value = getattr(pytest_aoti, name)
        assert isinstance(value, type), name
        assert value.__module__.startswith("pytest_aoti."), name


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_module_keeps_its_classes(name: str) -> None:
    errors = importlib.import_module("pytest_aoti.errors")
    cls = getattr(errors, name)
    assert cls is getattr(pytest_aoti, name)
    for base in ERRORS[name]:
        assert issubclass(cls, base), f"{name} is no longer a {base.__name__}"


def test_errors_module_keeps_stage_names_and_stage() -> None:
    from pytest_aoti.errors import STAGE_NAMES, AotiCompileError, AotiExportError

    assert STAGE_NAMES == ("eager", "export", "decompose", "compile")
    assert AotiExportError("x").stage == "export"
    assert AotiExportError("x", stage="decompose").stage == "decompose"
    assert AotiCompileError("x").stage == "compile"


class Rows(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=1)


@pytest.fixture(scope="module")
def rows_program() -> torch.export.ExportedProgram:
    from pytest_aoti.compiling.pipeline import export_module

    return export_module(
        Rows(), (torch.ones(4, 3),), {}, dynamic_shapes=({0: Dim("rows", min=2, max=9)},)
    )


def test_strategies_module_keeps_its_functions() -> None:
    strategies = importlib.import_module("pytest_aoti.strategies")
    for name in ("shapes_for", "inputs_for"):
        assert callable(getattr(strategies, name)), name
        assert name in strategies.__all__


def test_shapes_for_and_inputs_for_draw_what_the_program_accepts(
    rows_program: torch.export.ExportedProgram,
) -> None:
    from pytest_aoti.strategies import inputs_for, shapes_for

    drawn: list[tuple[int, ...]] = []

    @settings(max_examples=10, database=None, deadline=None)
    @given(
        shapes=shapes_for(rows_program), inputs=inputs_for(rows_program, like=(torch.ones(4, 3),))
    )
    def draws(shapes: dict[str, tuple[int, ...]], inputs: tuple[tuple[torch.Tensor], dict]) -> None:
        ((x,), kwargs) = inputs
        assert kwargs == {}
        assert 2 <= shapes["x"][0] <= 9 and shapes["x"][1] == 3
        assert 2 <= x.shape[0] <= 9 and x.shape[1] == 3 and x.dtype == torch.float32
        drawn.append(shapes["x"])

    draws()
    assert drawn


def test_strategies_refuse_what_is_not_a_program() -> None:
    from pytest_aoti.strategies import shapes_for

    with pytest.raises(pytest_aoti.AotiUsageError, match="expected an ExportedProgram"):
        shapes_for(object())


def test_pytest11_entry_point_names_the_plugin_module() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = re.search(
        r"^\[project\.entry-points\.pytest11\]\n(?P<body>(?:[^\[].*\n?)*)", text, re.M
    )
    assert section is not None, "pyproject.toml lost its [project.entry-points.pytest11]"
    assert re.search(r'^aoti\s*=\s*"pytest_aoti\.plugin"\s*$', section["body"], re.M)
    installed = [
        entry for entry in importlib.metadata.entry_points(group="pytest11") if entry.name == "aoti"
    ]
    if installed:  # where the package is installed, pytest loads it through this entry
        assert installed[0].value == "pytest_aoti.plugin"
        assert installed[0].load() is importlib.import_module("pytest_aoti.plugin")


def test_entry_point_loads_the_plugin(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*--aoti-device*"])
    blocked = pytester.runpytest("-p", "no:aoti", "--help")
    assert "--aoti-device" not in blocked.stdout.str()


def test_plugin_loads_by_module_name(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_fixture(aoti_device):
            assert aoti_device.type == "cpu"
        """
    )
    result = pytester.runpytest("-p", "no:aoti", "-p", "pytest_aoti.plugin", "--aoti-device=cpu")
    result.assert_outcomes(passed=1)
