"""Repro bundles: written by ``write_bundle``, run by plain Python in a fresh process.

Two real compiles for the whole file (module-scoped fixtures); every ``repro.py`` runs in a
subprocess from a directory outside the repository, as a compiler engineer would run it.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_aoti.compiling.pipeline import (
    compile_package,
    decompose,
    export_module,
    quiet_torch_deprecations,
)
from pytest_aoti.folder_names import MAX_NAME_LENGTH, bundle_dir_name
from pytest_aoti.triage import repro_script
from pytest_aoti.triage.repro import REPRO_SCRIPT_FILE, write_bundle

REPRO_SCRIPT = REPRO_SCRIPT_FILE.read_text(encoding="utf-8")


def example() -> torch.Tensor:
    return torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])


class TimesThree(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 3


class OffWhenExported(torch.nn.Module):
    """Adds 0.5 to element [1, 0] while torch.export traces: the exported program and the
    engine both differ from eager, an honest fault that needs no torch bug."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 3
        if torch.compiler.is_exporting():
            y = y + torch.tensor([[0.0, 0.0], [0.5, 0.0], [0.0, 0.0]])
        return y


class DoubleThenCos(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return x.cos()


@dataclass(frozen=True)
class Compiled:
    exported: torch.export.ExportedProgram
    package: Path


def compile_module(module: torch.nn.Module, args: tuple[Any, ...], directory: Path) -> Compiled:
    exported = export_module(module, args, {})
    package = compile_package(decompose(exported), directory / "model.pt2", None)
    return Compiled(exported, package)


def eager_results(module: torch.nn.Module, x: torch.Tensor, calls: int) -> list[Any]:
    """What the check records: per call, (outputs, {input name: input after the call})."""
    x = x.clone()
    results = []
    for _ in range(calls):
        with torch.no_grad():
            out = module(x)
        results.append((out.clone(), {"x": x.clone()}))
    return results


def bundle(
    directory: Path,
    compiled: Compiled,
    module: torch.nn.Module,
    *,
    calls: int = 1,
    exported: torch.export.ExportedProgram | None = None,
) -> Path:
    return write_bundle(
        directory,
        exported=exported or compiled.exported,
        package_path=compiled.package,
        args=(example(),),
        kwargs={},
        calls=calls,
        eager_results=eager_results(module, example(), calls),
        rtol=None,
        atol=None,
        finding_text="output differs between eager and the AOTI engine",
        finding_json={"kind": "output", "location": "output", "dtype": torch.float32},
    )


def run_repro(script: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python repro.py`` in a fresh process."""
    return subprocess.run(
        [sys.executable, str(script)], cwd=cwd, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def off_compiled(tmp_path_factory: pytest.TempPathFactory) -> Compiled:
    with quiet_torch_deprecations():
        return compile_module(OffWhenExported(), (example(),), tmp_path_factory.mktemp("off"))


@pytest.fixture(scope="module")
def off_bundle(tmp_path_factory: pytest.TempPathFactory, off_compiled: Compiled) -> Path:
    directory = tmp_path_factory.mktemp("bundles") / bundle_dir_name("t.py::test_off[cpu]")
    return bundle(directory, off_compiled, OffWhenExported())


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A working directory outside the repository."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    return cwd


@pytest.mark.compiles
def test_engine_mismatch_reproduces_with_figures(off_bundle: Path, elsewhere: Path) -> None:
    result = run_repro(off_bundle, elsewhere)
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    headline = (
        "  output, call 1 of 1: 1 of 6 elements beyond rtol=1.3e-06, atol=1e-05 "
        "(shape (3, 2), torch.float32)\n"
        "    max abs error 0.5, max rel error 0.0556; worst at index (1, 0): eager=9 {}=9.5\n"
    )
    for label in ("engine", "exported", "decomposed"):
        assert headline.format(label) in out, out
    assert "REPRODUCED: the AOTI engine differs from eager (output difference at output)." in out
    assert "The exported program differs from eager too" in out
    assert "pytest-aoti reported: output differs between eager and the AOTI engine" in out
    assert "1 call; tolerance: torch.testing.assert_close's defaults for each dtype" in out


@pytest.mark.compiles
def test_bundle_holds_the_files_and_is_replaced(off_bundle: Path, off_compiled: Compiled) -> None:
    directory = off_bundle.parent
    assert sorted(path.name for path in directory.iterdir()) == [
        "check.json",
        "eager.pt",
        "exported.pt2",
        "finding.json",
        "finding.txt",
        "inputs.pt",
        "package.pt2",
        "repro.py",
    ]
    check = json.loads((directory / "check.json").read_text())
    assert check == {
        "calls": 1,
        "rtol": None,
        "atol": None,
        "device": "cpu",
        "torch": torch.__version__,
        "reproduces": {"kind": "output", "location": "output"},
        "outputs": ["output"],
        "mutated_inputs": [],
        "input_tree": check["input_tree"],
        "output_tree": check["output_tree"],
    }
    assert "TreeSpec(tuple" in check["input_tree"], check
    assert json.loads((directory / "finding.json").read_text())["dtype"] == "torch.float32"
    assert off_bundle.read_text() == REPRO_SCRIPT

    # written again into an existing folder: its old contents go
    other = directory.parent / "again"
    other.mkdir()
    (other / "stale.txt").write_text("old")
    bundle(other, off_compiled, OffWhenExported())
    assert not (other / "stale.txt").exists()
    assert (other / "repro.py").exists()


@pytest.mark.compiles
def test_engine_alone_differs_blames_the_compile(
    tmp_path: Path, off_compiled: Compiled, elsewhere: Path
) -> None:
    # a correct exported program beside the faulty engine: the repro must tell that the
    # exported and decomposed programs match eager and only the engine differs
    with quiet_torch_deprecations():
        exported = export_module(TimesThree(), (example(),), {})
    script = bundle(tmp_path / "b", off_compiled, TimesThree(), exported=exported)
    result = run_repro(script, elsewhere)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.count("matches on every call") == 2, result.stdout
    assert "The exported and the decomposed programs match eager" in result.stdout


@pytest.mark.compiles
def test_correct_mutating_model_does_not_reproduce(
    tmp_path_factory: pytest.TempPathFactory, elsewhere: Path
) -> None:
    with quiet_torch_deprecations():
        compiled = compile_module(DoubleThenCos(), (example(),), tmp_path_factory.mktemp("dbl"))
    script = bundle(tmp_path_factory.mktemp("b") / "b", compiled, DoubleThenCos(), calls=2)
    result = run_repro(script, elsewhere)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("matches on every call") == 3, result.stdout
    assert "NOT REPRODUCED" in result.stdout
    assert "2 calls;" in result.stdout


def copy_bundle(bundle_script: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(bundle_script.parent, target)
    return target / "repro.py"


@pytest.mark.compiles
def test_bundle_that_cannot_run_exits_2(off_bundle: Path, tmp_path: Path, elsewhere: Path) -> None:
    script = copy_bundle(off_bundle, tmp_path)
    (script.parent / "package.pt2").unlink()
    result = run_repro(script, elsewhere)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "COULD NOT RUN: package.pt2 missing from the bundle " in result.stderr
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.compiles
def test_a_package_that_does_not_load_is_named(
    off_bundle: Path, tmp_path: Path, elsewhere: Path
) -> None:
    script = copy_bundle(off_bundle, tmp_path)
    (script.parent / "package.pt2").write_bytes(b"not a zip archive")
    result = run_repro(script, elsewhere)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "COULD NOT RUN: package.pt2 does not load: " in result.stderr


SYSTEM_PYTHON = Path("/usr/bin/python3")


def _has_torch(python: Path) -> bool:
    found = subprocess.run([str(python), "-c", "import torch"], capture_output=True, timeout=120)
    return found.returncode == 0


@pytest.mark.compiles
@pytest.mark.parametrize("python", ["system", "isolated without site"])
def test_a_python_without_torch_could_not_run_it(
    off_bundle: Path, elsewhere: Path, python: str
) -> None:
    """Exit 2, said before the replay starts: never 1, the code of a reproduced finding."""
    if python == "system":
        if not SYSTEM_PYTHON.is_file() or _has_torch(SYSTEM_PYTHON):
            pytest.skip("needs a system Python without torch")
        command = [str(SYSTEM_PYTHON), "-I", str(off_bundle)]
    else:  # this interpreter, its site-packages (and torch with them) left out
        command = [sys.executable, "-I", "-S", str(off_bundle)]
    result = subprocess.run(command, cwd=elsewhere, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "COULD NOT RUN: torch is not importable by " in result.stderr
    assert "Traceback" not in result.stderr
    # the replay itself (a debugger's --in-process) says the same with the same code
    inline = subprocess.run(
        [*command, "--in-process"], cwd=elsewhere, capture_output=True, text=True, timeout=120
    )
    assert inline.returncode == 2, inline.stdout + inline.stderr
    assert "COULD NOT RUN: torch" in inline.stderr


@pytest.mark.compiles
def test_the_replay_runs_with_the_interpreters_flags(
    off_bundle: Path, tmp_path: Path, elsewhere: Path
) -> None:
    script = copy_bundle(off_bundle, tmp_path)
    text = script.read_text()
    show = (
        "def replay_bundle() -> int:\n"
        "    print('child flags', sys.flags.isolated, sys.flags.dont_write_bytecode, "
        "sys.flags.optimize)\n"
        "    return 0\n"
    )
    script.write_text(text.replace("def replay_bundle() -> int:\n", show, 1))
    result = subprocess.run(
        [sys.executable, "-I", "-B", "-O", str(script)],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "child flags 1 1 1" in result.stdout


@pytest.mark.compiles
def test_another_difference_does_not_count_as_reproduced(
    off_bundle: Path, tmp_path: Path, elsewhere: Path
) -> None:
    script = copy_bundle(off_bundle, tmp_path)
    check = json.loads((script.parent / "check.json").read_text())
    check["reproduces"] = {"kind": "mutated input", "location": "input 'x'"}
    (script.parent / "check.json").write_text(json.dumps(check))
    result = run_repro(script, elsewhere)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "NOT REPRODUCED: the AOTI engine differs from eager, but not as reported" in (
        result.stdout
    )


@pytest.mark.compiles
def test_death_by_a_signal_is_reported(off_bundle: Path, tmp_path: Path, elsewhere: Path) -> None:
    # the replay killed as a crashing engine would kill it, once it has extracted a
    # package into a temporary folder as the buffer read-back does
    script = copy_bundle(off_bundle, tmp_path)
    text = script.read_text()
    crash = (
        "def replay_bundle() -> int:\n"
        "    import os, tempfile\n"
        "    tempfile.mkdtemp(prefix='repro-buffers-', dir=os.environ.get("
        "'PYTEST_AOTI_REPRO_SCRATCH'))\n"
        "    os.kill(os.getpid(), signal.SIGSEGV)\n"
    )
    script.write_text(text.replace("def replay_bundle() -> int:\n", crash, 1))
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=elsewhere,
        env={**os.environ, "TMPDIR": str(temporary)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 128 + signal.SIGSEGV, result.stdout + result.stderr
    assert "DIED: the replay was killed by SIGSEGV (11)" in result.stderr
    assert list(temporary.iterdir()) == [], "the dead replay's temporary folder is left behind"


# Blocks every import of pytest and of the plugin, then runs the script as `python repro.py`.
_WITHOUT_PYTEST = (
    "import runpy, sys\n"
    "for name in ('pytest', '_pytest', 'pytest_aoti'):\n"
    "    sys.modules[name] = None\n"
    "runpy.run_path(sys.argv[1], run_name='__main__')\n"
)


@pytest.mark.compiles
def test_script_needs_only_torch(off_bundle: Path, elsewhere: Path) -> None:
    imports = re.findall(r"^\s*(?:import|from)\s+([\w.]+)", REPRO_SCRIPT, re.MULTILINE)
    packages = {name.partition(".")[0] for name in imports}
    assert "torch" in packages
    assert packages - {"torch"} <= sys.stdlib_module_names, packages
    result = subprocess.run(
        [sys.executable, "-I", "-c", _WITHOUT_PYTEST, str(off_bundle), "--in-process"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "REPRODUCED" in result.stdout


def test_a_bundles_script_is_the_module_file_byte_for_byte(tmp_path: Path) -> None:
    """No compile: the package file is a stand-in, copied like any."""
    with quiet_torch_deprecations():
        exported = export_module(TimesThree(), (example(),), {})
    package = tmp_path / "model.pt2"
    package.write_bytes(b"not compiled: write_bundle only copies it")
    script = bundle(tmp_path / "bundle", Compiled(exported, package), TimesThree())
    assert script.name == "repro.py"
    assert script.read_bytes() == Path(repro_script.__file__).read_bytes()


def test_the_one_tolerance_table_is_assert_closes() -> None:
    """The table the bundle and the check fall back on where torch's private helper moves:
    assert_close's own defaults, complex32 and the quantized dtypes included."""
    comparison = pytest.importorskip("torch.testing._comparison")
    precisions = getattr(comparison, "_DTYPE_PRECISIONS", None)
    if precisions is None:
        pytest.skip("this torch keeps assert_close's defaults elsewhere")
    from pytest_aoti import tolerance

    by_name = {str(dtype).removeprefix("torch."): value for dtype, value in precisions.items()}
    assert repro_script.DEFAULT_TOLERANCES == tolerance.DEFAULT_TOLERANCES == by_name
    for dtype in precisions:
        assert repro_script.default_tolerance(dtype) == precisions[dtype]
        assert tolerance.default_tolerance(dtype) == precisions[dtype]


def test_the_script_s_copies_agree_with_the_package() -> None:
    """The script runs alone, so it holds its own copies of what the package does: the
    engine's library in torch's runner and its extraction (the same source), the user
    inputs by name and the layout-keeping clone (the same answers)."""
    import importlib
    import inspect

    import torch

    from pytest_aoti.mutation_maps import named_user_inputs

    # the module as sys.modules holds it: an inner pytest session that first imported it
    # removes it from sys.modules on exit, and inspect finds a class's file through there
    library_runner = importlib.import_module("pytest_aoti.compiling.library_runner")
    from pytest_aoti.trees import clone_tree

    for name in ("RUNNERS", "aoti_runner_class", "extract_model_library", "LibraryRunner"):
        ours, theirs = getattr(library_runner, name), getattr(repro_script, name)
        if callable(ours):
            assert inspect.getsource(ours) == inspect.getsource(theirs), name
        else:
            assert ours == theirs, name

    class Two(torch.nn.Module):
        def forward(self, x, *, scale, shift):
            return x * scale + shift

    args, kwargs = (torch.randn(2),), {"shift": torch.ones(2), "scale": torch.ones(2)}
    exported = torch.export.export(Two(), args, kwargs)
    assert list(repro_script.named_user_inputs(exported, args, kwargs)) == list(
        named_user_inputs(exported, args, kwargs)
    )
    for tensor in (torch.randn(3, 8)[:, ::2], torch.randn(1, 4).expand(3, 4), torch.tensor(5)):
        a, b = repro_script.clone(tensor), clone_tree(tensor)
        assert (a.stride(), a.storage_offset()) == (b.stride(), b.storage_offset())
        assert torch.equal(a, b)


def test_the_script_module_imports_torch_and_the_standard_library_only() -> None:
    """Every import of the module, at its top or in a function, and every module it names
    to importlib: none of pytest_aoti (it runs where only torch is installed)."""
    source = Path(repro_script.__file__).read_text(encoding="utf-8")
    imported: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"a relative import at line {node.lineno}"
            imported.append((node.module or "", node.lineno))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, (ast.Attribute, ast.Name))
            and getattr(node.func, "attr", getattr(node.func, "id", ""))
            in ("import_module", "find_spec", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            imported.append((node.args[0].value, node.lineno))
    tops = {name.partition(".")[0]: line for name, line in imported}
    assert "pytest_aoti" not in tops, f"imports pytest_aoti at line {tops['pytest_aoti']}"
    assert "torch" in tops
    assert set(tops) - {"torch"} <= sys.stdlib_module_names, tops


@pytest.mark.parametrize(
    ("nodeid", "expected"),
    [
        ("tests/test_m.py::test_x[cpu]", "tests_test_m.py__test_x-cpu-"),
        ("tests/test_m.py::TestA::test_y", "tests_test_m.py__TestA__test_y"),
        ("test_m.py::test_z[float32-2-cpu]", "test_m.py__test_z-float32-2-cpu-"),
    ],
)
def test_bundle_dir_name_is_readable(nodeid: str, expected: str) -> None:
    assert bundle_dir_name(nodeid) == expected


SAFE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


@pytest.mark.parametrize(
    "nodeid",
    [
        "tests/test_m.py::test_x[a b-cpu]",
        "tests\\win.py::test[x/y]",
        "t.py::test[é-ü]",
        "t.py::test['quoted' \"too\"]",
        "..",
        "",
        "x" * 1000,
        "tests/" + "deep/" * 100 + "test_m.py::test_x[cpu]",
    ],
)
def test_bundle_dir_name_is_safe(nodeid: str) -> None:
    name = bundle_dir_name(nodeid)
    assert SAFE_NAME.fullmatch(name), name
    assert len(name) <= MAX_NAME_LENGTH
    assert name == bundle_dir_name(nodeid)


def test_bundle_dir_name_keeps_ids_apart() -> None:
    long_base = "tests/test_m.py::test_x[" + "p" * 300
    ids = [
        "t.py::test[a b]",
        "t.py::test[a_b]",
        "t.py::test[a\tb]",
        long_base + "1]",
        long_base + "2]",
    ]
    names = [bundle_dir_name(nodeid) for nodeid in ids]
    assert len(set(names)) == len(ids), names
    assert names[3].startswith("tests_test_m.py__test_x-ppp")


# --- the script's own logic, in this process: no compile needed ------------------------


@pytest.fixture(scope="module")
def script() -> dict[str, Any]:
    """The functions of repro.py, imported as the package's module rather than run as __main__."""
    return vars(repro_script)


def test_script_compares_each_kind_of_leaf(script: dict[str, Any]) -> None:
    def compare(
        expected: Any, actual: Any, rtol: float | None = None, atol: float | None = None
    ) -> list[str]:
        lines: list[str] = script["compare"]("out", "engine", expected, actual, rtol, atol)
        return lines

    t, nan, inf = torch.tensor, float("nan"), float("inf")
    assert compare(t([1.0, nan, inf]), t([1.0, nan, inf])) == []
    assert compare(t([1.0]), t([1.05]), atol=0.1) == []  # the saved tolerance applies
    assert compare(3, t(3)) == []  # a Python number comes back as a 0-dim tensor
    assert compare(3, t(4)) == ["out: eager 3, engine 4"]
    [line] = compare(t([1.0, nan]), t([1.0, 2.0]))
    assert line.startswith("out: 1 of 2 elements beyond rtol=1.3e-06, atol=1e-05"), line
    [line] = compare(t([1, 2, 3]), t([1, 2, 5]), rtol=1.0, atol=10.0)
    assert "1 of 3 elements beyond rtol=0, atol=0" in line  # integers compare exactly
    assert "max abs error 2, max rel error 0.667; worst at index (2,): eager=3 engine=5" in line
    [line] = compare(t([True, False]), t([True, True]))
    assert "1 of 2 elements beyond rtol=0, atol=0" in line
    [line] = compare(t([1 + 1j]), t([1 + 2j]))
    assert "max abs error 1, max rel error 0.707" in line
    [line] = compare(t([1.0, 2.0]), t([1.0, 2.0, 3.0]))
    assert line.startswith("out: The values for attribute 'shape' do not match"), line


def test_script_reports_a_raising_program_and_orders_keywords(script: dict[str, Any]) -> None:
    class Keywords(torch.nn.Module):
        def forward(self, x: torch.Tensor, *, b: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
            return x + a * b

    x, a, b = example(), example() + 1, example() + 2
    with quiet_torch_deprecations():
        exported = torch.export.export(Keywords(), (x,), {"b": b, "a": a})
    named = script["named_user_inputs"](exported, (x,), {"a": a, "b": b})
    assert named == {"x": x, "a": a, "b": b}
    assert all(named[name] is leaf for name, leaf in (("x", x), ("a", a), ("b", b)))

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    eager = [([Keywords()(x, b=b, a=a)], {"x": x, "a": a, "b": b})] * 2
    run = script["run_and_compare"]
    assert (
        run("exported", exported.module(), exported, (x,), {"a": a, "b": b}, eager, None, None)
        == []
    )
    [(kind, location, report)] = run(
        "engine", broken, exported, (x,), {"b": b, "a": a}, eager, None, None
    )
    assert (kind, location) == ("raised", "")
    assert report.startswith("call 1 of 2: raised\nTraceback"), report
    assert report.endswith("RuntimeError: boom"), report


def test_only_failures_the_script_can_reproduce_get_a_bundle() -> None:
    from pytest_aoti.generated.feature import GENERATED
    from pytest_aoti.probes.feature import PROBES
    from pytest_aoti.triage.repro import reproduces
    from pytest_aoti.weights.feature import WEIGHTS

    assert reproduces({"kind": "output", "location": "output[0]"}) == {
        "kind": "output",
        "location": "output[0]",
    }
    shape = {"kind": "shape", "location": "input 'x'", "extra": {"inner_kind": "mutated input"}}
    # a feature's kind of failure, as its bundle adapter says (unknown to the core alone)
    assert reproduces(shape, (), (), GENERATED.bundle) == {
        "kind": "mutated input",
        "location": "input 'x'",
    }
    assert reproduces(shape) is None
    probe = {"kind": "probe", "location": "input 'x'", "extra": {"kind": "dtype"}}
    assert reproduces(probe, (), (), PROBES.bundle) == {"kind": "output", "location": ""}
    # a stateful program diverging on call 2 shows at the output or input it reached
    assert reproduces({"kind": "buffer", "location": "output"}) == {
        "kind": "output",
        "location": "output",
    }
    assert reproduces({"kind": "buffer", "location": "input 'x'"}, {"x"}) == {
        "kind": "mutated input",
        "location": "input 'x'",
    }
    # a mutated buffer the engine holds wrong, read back by the script; a buffer the program
    # does not record as mutated (an export finding) is not the engine's difference
    counter = {"kind": "buffer", "location": "buffer 'counter'"}
    assert reproduces(counter, (), {"counter"}) == counter
    assert reproduces({"kind": "buffer", "location": "buffers 'a', 'b'"}, (), {"a", "b"}) is None
    # a failed weight swap: the difference its set made, once the bundle loads the set; a
    # swap that made none (a refused weight alone) has nothing to show
    differed = {"set": 0, "kind": "output", "location": "output[1]", "max_abs": 0.14}
    swap = {
        "kind": "weights",
        "location": "weights",
        "extra": {"weights": {"difference": differed}},
    }
    assert reproduces(swap, (), (), WEIGHTS.bundle) == {"kind": "output", "location": "output[1]"}
    none = {"kind": "weights", "location": "weights", "extra": {"weights": {"difference": None}}}
    assert reproduces(none, (), (), WEIGHTS.bundle) is None
    for kind, location in [
        ("signature", ""),
        ("expectation", "input 'x'"),
        ("buffer", "buffer 'counter'"),
        ("threads", "buffer 'counter'"),
        ("memory", ""),
    ]:
        assert reproduces({"kind": kind, "location": location}, (), {"level"}) is None, kind
