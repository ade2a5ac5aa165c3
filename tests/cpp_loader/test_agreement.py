"""How the C++ loader's results are judged and reported, without a compile: bit for bit
against the Python engine where the settings match, within the tolerance otherwise; eager's
only where the Python engine is within it; the failure names the loader and the output; the
skip reasons, the header and summary lines, the JUnit properties."""

from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from pytest_aoti import AotiCheckError
from pytest_aoti.compiling.custom_ops import child_preparation
from pytest_aoti.cpp_loader.agreement import Agreement, loader_failed, max_abs, perturbed
from pytest_aoti.cpp_loader.check import program_reason, skipped
from pytest_aoti.cpp_loader.feature import cpp_loader_properties
from pytest_aoti.cpp_loader.lines import header_line, summary_lines
from pytest_aoti.tolerance import Tolerance


def exact() -> Agreement:
    return Agreement("the example", True, "bit for bit (4 threads)", Tolerance())


def loose() -> Agreement:
    return Agreement("sample 1", False, "within the check's tolerance", Tolerance())


def test_bit_for_bit_a_one_ulp_difference_fails_naming_the_loader_and_the_output() -> None:
    engine = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    loader = engine.clone()
    loader[1, 0] = torch.nextafter(torch.tensor(3.0), torch.tensor(4.0))
    exact().with_engine("output[0]", engine, engine.clone())
    with pytest.raises(AotiCheckError) as failed:
        exact().with_engine("output[0]", engine, loader)
    text = str(failed.value)
    first = text.splitlines()[0]
    assert first.startswith(
        "the C++ loader (AOTIModelPackageLoader): output[0] differs from the Python engine's "
        "on the example: 1 of 4 elements"
    )
    assert "must agree with the Python engine bit for bit (4 threads)" in text
    assert "worst at index (1, 0): Python engine=3 C++ loader=3" in text
    assert "cpp_loader=False (or --aoti-cpp-loader=off) leaves this check out" in text
    loose().with_engine("output[0]", engine, loader)  # within the dtype's tolerance


@pytest.mark.parametrize(
    ("engine", "loader", "says"),
    [
        (torch.zeros(2, 3), torch.zeros(3, 2), "shape: Python engine torch.Size([2, 3])"),
        (torch.zeros(2), torch.zeros(2, dtype=torch.float64), "dtype: Python engine torch.float32"),
        (torch.tensor([1.0, math.nan]), torch.tensor([1.0, 2.0]), "NaN on one side only"),
        (torch.tensor([1, 2]), torch.tensor([1, 3]), "1 of 2 elements differ"),
    ],
)
def test_shape_dtype_nan_and_integer_differences_fail(
    engine: torch.Tensor, loader: torch.Tensor, says: str
) -> None:
    with pytest.raises(AotiCheckError, match="differs from the Python engine's") as failed:
        loose().with_engine("output['sum']", engine, loader)
    assert says in str(failed.value).splitlines()[0]


def test_nan_where_nan_is_equal() -> None:
    values = torch.tensor([math.nan, -math.inf, 0.0])
    exact().with_engine("output", values, values.clone())
    assert max_abs(values, values.clone()) == 0.0


def test_eager_is_judged_only_where_the_python_engine_is_within_the_tolerance() -> None:
    eager = torch.tensor([1.0, 2.0])
    off = torch.tensor([1.0, 2.5])
    exact().with_eager("output", eager, off, off)  # bit-equal to the engine: parity judged it
    loose().with_eager("output", eager, off, off)  # the engine is off too: parity's own rule
    with pytest.raises(AotiCheckError) as failed:
        loose().with_eager("output", eager, eager.clone(), off)
    first = str(failed.value).splitlines()[0]
    assert first.startswith(
        "the C++ loader (AOTIModelPackageLoader): output differs from eager's on sample 1"
    )


def test_a_different_count_of_outputs_fails() -> None:
    with pytest.raises(AotiCheckError, match="the Python engine has 2 outputs, the C"):
        exact().count("outputs", 2, 1)
    exact().count("outputs", 2, 2)


def test_a_runner_failure_names_the_stage_and_the_loader() -> None:
    error = loader_failed("load", "PytorchStreamReader failed", "the example")
    assert str(error).splitlines()[0] == (
        "the C++ loader (AOTIModelPackageLoader) could not load the package on the example: "
        "PytorchStreamReader failed"
    )
    assert "the Python engine (aoti_load_package) ran it" in str(error)


def test_the_test_hook_changes_a_copy_of_the_first_floating_point_input() -> None:
    ints = torch.tensor([1, 2])
    floats = torch.arange(6.0).reshape(2, 3).t()  # not contiguous: its layout is kept
    changed = perturbed([ints, floats])
    assert changed[0] is ints and floats[0, 0] == 0.0
    assert changed[1][0, 0] == 1.0 and changed[1].stride() == floats.stride()
    assert max_abs(floats, changed[1]) == 1.0
    assert perturbed([ints]) == [ints]


def test_max_abs_reads_numbers_and_complex() -> None:
    assert max_abs(2.0, torch.tensor(2.5)) == 0.5
    assert max_abs(torch.tensor([1 + 1j]), torch.tensor([1 + 2j])) == 1.0
    assert max_abs(torch.tensor([1.0]), torch.tensor([1.0, 2.0])) == 0.0
    assert max_abs(None, None) == 0.0


def package_calling(tmp_path: Path, op: str) -> Path:
    """A package whose extern-kernel nodes call ``op`` (what the custom-op scan reads)."""
    path = tmp_path / "model.pt2"
    nodes = {"nodes": [{"node": {"target": f"{op}.default"}}]}
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("model/data/aotinductor/model/kernels.json", json.dumps(nodes))
    return path


@torch.library.custom_op("cpp_loader_test::scale", mutates_args=())
def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def context_of(package: Path, device: str = "cpu", random_ops: tuple[object, ...] = ()) -> object:
    program = SimpleNamespace(
        package_path=package, child_preparation=lambda: child_preparation(package)
    )
    return SimpleNamespace(program=program, device=torch.device(device), random_ops=random_ops)


def test_a_program_calling_a_custom_op_registered_in_python_is_skipped(tmp_path: Path) -> None:
    why = program_reason(context_of(package_calling(tmp_path, "cpp_loader_test::scale")))  # type: ignore[arg-type]
    assert why.startswith("the program calls custom ops registered in Python (")
    assert why.endswith("test_agreement), which a process without Python lacks")
    assert program_reason(context_of(package_calling(tmp_path, "aten::mm"))) == ""  # type: ignore[arg-type]
    assert "random" in program_reason(
        context_of(package_calling(tmp_path, "aten::mm"), random_ops=("rand",))  # type: ignore[arg-type]
    )
    assert "not meta" in program_reason(context_of(tmp_path / "none.pt2", device="meta"))  # type: ignore[arg-type]


def test_skips_are_a_record_and_a_program_s_reason_a_note() -> None:
    part = skipped("no C++ compiler: CXX=/x is not found", machine=True)
    assert part.fields == {
        "cpp_loader": {
            "ran": False,
            "skipped": "no C++ compiler: CXX=/x is not found",
            "machine": True,
        }
    }
    assert part.notes == ()
    assert cpp_loader_properties(part.fields) == [
        ("aoti_cpp_loader", "skipped: no C++ compiler: CXX=/x is not found")
    ]
    assert cpp_loader_properties({"cpp_loader": None}) == []
    ran = {"cpp_loader": {"ran": True, "max_abs_vs_engine": 0.0, "max_abs_vs_eager": 1e-7}}
    assert cpp_loader_properties(ran) == [
        ("aoti_cpp_loader", "passed"),
        ("aoti_cpp_loader_max_abs_vs_engine", 0.0),
        ("aoti_cpp_loader_max_abs_vs_eager", 1e-7),
    ]


def test_the_header_and_summary_lines() -> None:
    assert header_line("no C++ compiler: x") == (
        "aoti: C++ loader (AOTIModelPackageLoader) check skipped on this machine: "
        "no C++ compiler: x"
    )
    assert header_line("it failed", "/c/cpp-loader").endswith(
        "it failed (remembered in /c/cpp-loader; remove it to build again)"
    )
    ran = {"ran": True, "exact": True, "load_seconds": 0.2, "call_seconds": 0.01}
    first = {**ran, "start_seconds": 0.5, "build_seconds": 61.2}
    lines = summary_lines(
        [first, ran, {**ran, "exact": False}, None, {"ran": False, "skipped": "why"}]
    )
    assert lines == [
        "aoti: C++ loader (AOTIModelPackageLoader): 3 check(s) ran their package without "
        "Python, 2 bit for bit against the Python engine (runner built in 61 s, runner start "
        "0.50 s, loads 0.600 s, calls 0.0300 s)",
        "aoti: C++ loader (AOTIModelPackageLoader) check skipped in 1 check(s): why",
    ]
    assert summary_lines([None, None]) == []
