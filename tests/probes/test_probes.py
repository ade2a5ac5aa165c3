"""Deployment probes: the raw engine called with variants of the example, judged against
eager and the exported program's guards, reported per check and failed under ``fail``.

Four programs compile once for the whole file (the shared cache dir): the conv net of
issue 17 (wrong in channels_last and on a strided slice), a static-batch MLP (another
batch is unguarded, its transposed input is fine), a Python float argument (a new value
is unguarded) and an input-mutating program (aliased inputs are wrong).
"""

from __future__ import annotations

import io
import json
import signal
import textwrap
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_aoti.compiling.custom_ops import child_preparation
from pytest_aoti.errors import AotiUsageError
from pytest_aoti.isolation import process as engine_process
from pytest_aoti.options.parsers import ValueProblem
from pytest_aoti.probes import check as probes
from pytest_aoti.probes import runner as probe_runner
from pytest_aoti.probes.feature import PROBE_KINDS, PROBE_POLICIES
from pytest_aoti.probes.outcomes import OUTCOMES

PROBED = """
import torch


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.BatchNorm2d(8)

    def forward(self, x):
        return (self.b(self.c(x)).relu() * x.mean(1, keepdim=True)).sum(dim=(2, 3))


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.l(x).relu()


class ScaledLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(8, 4)

    def forward(self, x, scale: float):
        return self.l(x) * scale


class MulAdd(torch.nn.Module):
    def forward(self, x, y):
        x.mul_(2)
        return x + y


def seeded(cls):
    torch.manual_seed(0)
    return cls().eval()


def test_conv(aoti):
    aoti.check(seeded(ConvNet), (torch.randn(2, 3, 8, 8),))


def test_mlp(aoti):
    aoti.check(seeded(MLP), (torch.randn(6, 8),))


def test_scalar(aoti):
    aoti.check(seeded(ScaledLinear), (torch.randn(6, 8), 2.0))


def test_aliasing(aoti):
    aoti.check(MulAdd(), (torch.rand(4) + 1, torch.rand(4) + 1))
"""


def hazards_section(lines: list[str]) -> list[str]:
    """The lines of the terminal's hazards section, without its title."""
    start = next(i for i, line in enumerate(lines) if "aoti: deployment hazards" in line)
    section = []
    for line in lines[start + 1 :]:
        if line.startswith(("---", "===", "aoti: ")):
            break
        section.append(line)
    return section


def _by_test(report: Path) -> dict[str, dict[str, Any]]:
    checks = json.loads(report.read_text())["checks"]
    return {check["test"].split("::")[1].split("[")[0]: check for check in checks}


def _probe(check: dict[str, Any], variant: str, input: str = "x") -> dict[str, Any]:
    found = [p for p in check["probes"] if p["variant"] == variant and p["input"] == input]
    assert len(found) == 1, (variant, check["probes"])
    return found[0]


@pytest.mark.compiles
def test_probes_report_hazards_merged_under_xdist(run_aoti, pytester, tmp_path: Path) -> None:
    report = tmp_path / "aoti.json"
    junit = tmp_path / "junit.xml"
    result = run_aoti(PROBED, "-n", "2", f"--aoti-report={report}", f"--junitxml={junit}")
    result.assert_outcomes(passed=4)
    checks = _by_test(report)
    assert set(checks) == {"test_conv", "test_mlp", "test_scalar", "test_aliasing"}
    assert {check["worker"] for check in checks.values()} == {"gw0", "gw1"}
    for check in checks.values():
        for probe in check["probes"]:
            assert set(probe) >= {
                "input",
                "variant",
                "outcome",
                "max_abs",
                "max_rel",
                "refused_with_checks",
                "remedy",
            }
            assert probe["outcome"] in OUTCOMES
            if probe["outcome"] in ("ok", "refused"):
                assert probe["remedy"] == ""

    conv = checks["test_conv"]
    for variant in ("channels_last", "strided_slice"):
        probe = _probe(conv, variant)
        assert probe["outcome"] == "wrong"
        assert probe["max_abs"] > 0.5
        assert probe["refused_with_checks"] is True
        assert "AOTI_RUNTIME_CHECK_INPUTS=1" in probe["remedy"]

    mlp = checks["test_mlp"]
    assert _probe(mlp, "size[0]=7")["outcome"] in ("unguarded", "refused")
    for variant in ("permuted", "strided_slice"):
        assert _probe(mlp, variant)["outcome"] == "ok"
    assert not [p for p in mlp["probes"] if p["outcome"] == "wrong"]

    scalar = checks["test_scalar"]
    probe = _probe(scalar, "value=3.0", input="scale")
    assert probe["outcome"] == "unguarded"
    assert "as a tensor" in probe["remedy"]

    aliasing = checks["test_aliasing"]
    for variant in ("same tensor", "overlapping views"):
        probe = _probe(aliasing, variant, input="x, y")
        assert probe["outcome"] == "wrong"
        assert probe["refused_with_checks"] is False

    # grouped by remedy: what input checks refuse in one paragraph naming no test, then
    # only the programs with hazards input checks do not catch
    result.stdout.fnmatch_lines(
        [
            "*aoti: deployment hazards*",
            "AOTI_RUNTIME_CHECK_INPUTS=1 refuses * variant(s) of * program(s) that their "
            "engines run without it, with other results than eager: layouts *, sizes *",
            "  remedy: set AOTI_RUNTIME_CHECK_INPUTS=1 in the serving process*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*test_aliasing[[]cpu[]]: * hazard(s) input checks do not catch",
            "  wrong: input 'x, y' same tensor: max abs error *; also runs with "
            "AOTI_RUNTIME_CHECK_INPUTS=1",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*test_scalar[[]cpu[]]: * hazard(s) input checks do not catch",
            "  unguarded: input 'scale' value=3.0: *",
            "    remedy: pass scale as a tensor*",
        ]
    )
    section = "\n".join(hazards_section(result.stdout.lines))
    assert "test_conv" not in section and "test_mlp" not in section
    cases = {
        case.get("name"): {prop.get("name"): prop.get("value") for prop in case.iter("property")}
        for case in ElementTree.parse(junit).getroot().iter("testcase")
    }
    assert int(cases["test_conv[cpu]"]["aoti_probes_wrong"]) >= 2
    assert cases["test_mlp[cpu]"]["aoti_probes_wrong"] == "0"


@pytest.mark.compiles
def test_probes_fail_policy_fails_wrong_variants_only(
    run_aoti, run_isolated, tmp_path: Path
) -> None:
    report = tmp_path / "aoti.json"
    bundles = tmp_path / "bundles"
    result = run_aoti(
        PROBED,
        "--aoti-probes=fail",
        f"--aoti-report={report}",
        f"--aoti-keep-failed={bundles}",
        "-p",
        "no:xdist",
    )
    result.assert_outcomes(passed=2, failed=2)
    checks = _by_test(report)
    for name in ("test_conv", "test_aliasing"):
        assert checks[name]["outcome"] == "failed"
        assert checks[name]["finding"]["kind"] == "probe"
        assert checks[name]["finding"]["stage"] == "compile"
        assert checks[name]["probes"]
    assert checks["test_mlp"]["outcome"] == "passed"
    assert checks["test_scalar"]["outcome"] == "passed"
    result.stdout.fnmatch_lines(
        [
            "*the AOTI compile broke it: deployment probe: the engine silently differs from "
            "eager on * input variant(s) the exported program accepts (first: input 'x' "
            "channels_last, max abs error *)",
        ]
    )
    result.stdout.fnmatch_lines(["*input 'x, y' same tensor: max abs error*"])
    import torch

    conv_bundle = next(path for path in bundles.iterdir() if "test_conv" in path.name)
    inputs = torch.load(conv_bundle / "inputs.pt")
    (x,) = inputs["args"]
    assert x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    # and it reproduces: the engine differs from eager on the variant, in a fresh process
    run = run_isolated(conv_bundle / "repro.py", tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "REPRODUCED" in run.stdout


@pytest.mark.compiles
def test_probes_off_runs_none(run_aoti, tmp_path: Path) -> None:
    report = tmp_path / "aoti.json"
    result = run_aoti(
        PROBED,
        "--aoti-probes=off",
        f"--aoti-report={report}",
        "-p",
        "no:xdist",
        "-k",
        "conv or aliasing",
    )
    result.assert_outcomes(passed=2)
    assert all(check["probes"] == [] for check in _by_test(report).values())
    assert "deployment hazards" not in result.stdout.str()


@pytest.mark.compiles
def test_marker_and_check_keyword_choose_policy_and_skip(run_aoti) -> None:
    source = PROBED + textwrap.dedent(
        """
        import pytest

        LAYOUTS = {"channels_last", "permuted", "strided_slice"}

        @pytest.mark.aoti(probes="fail", probes_skip={"x": LAYOUTS})
        def test_conv_without_layouts(aoti):
            result = aoti.check(seeded(ConvNet), (torch.randn(2, 3, 8, 8),))
            assert not {p.kind for p in result.probes.outcomes} & LAYOUTS

        def test_conv_keyword(aoti):
            aoti.check(seeded(ConvNet), (torch.randn(2, 3, 8, 8),), probes="fail")

        def test_bad_skip(aoti):
            aoti.check(seeded(MLP), (torch.randn(6, 8),), probes_skip={"x": {"sideways"}})
        """
    )
    result = run_aoti(source, "-p", "no:xdist", "-k", "without_layouts or keyword or bad_skip")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*def test_conv_keyword(aoti):*",
            "E       *AotiCheckError: the AOTI compile broke it: deployment probe: *",
        ]
    )
    result.stdout.fnmatch_lines(
        ["*probes_skip?'x'? names unknown variant kind(s) sideways; known: channels_last*"]
    )


def test_bad_probes_option_is_a_usage_error(pytester) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest("--aoti-probes=sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*expected one of off, report, fail, got 'sometimes'*"])


# --- pure logic, no compile ------------------------------------------------------------


def test_check_skip_and_policy() -> None:
    assert probes.check_skip(None) == {}
    assert probes.check_skip({"channels_last"}) == {"*": frozenset({"channels_last"})}
    assert probes.check_skip({"x": "size"}) == {"x": frozenset({"size"})}
    assert probes.check_skip({"x": {"*"}})["x"] == frozenset(PROBE_KINDS)
    with pytest.raises(AotiUsageError, match="unknown variant kind"):
        probes.check_skip({"diagonal"})
    assert PROBE_POLICIES.check("probes", "FAIL") == "fail"
    with pytest.raises(ValueProblem, match="off, report, fail"):
        PROBE_POLICIES.check("probes", "loud")


def _program_stub(module: Any, args: tuple[Any, ...], mutated: set[str]) -> Any:
    import torch

    exported = torch.export.export(module, args)
    package = Path("/nonexistent/package.pt2")
    return SimpleNamespace(
        exported=exported,
        mutated_inputs=mutated,
        mutated_buffers=set(),
        device=torch.device("cpu"),
        package_path=package,
        child_preparation=lambda: child_preparation(package),
        key="stub",
    )


class _MulAdd:
    @staticmethod
    def make() -> Any:
        import torch

        class MulAdd(torch.nn.Module):
            def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
                x.mul_(2)
                return x + y

        return MulAdd()


def test_variants_follow_rank_and_leave_aliased_examples_to_the_aliasing_check() -> None:
    import torch

    x, y = torch.ones(4, 3), torch.ones(4, 3)
    distinct = _program_stub(_MulAdd.make(), (x.clone(), y.clone()), {"x"})
    variants = probes.choose_variants(distinct, (x, y), {}, {})
    names = {(v.input, v.variant) for v in variants}
    assert ("x, y", "same tensor") in names and ("x, y", "overlapping views") in names
    assert ("x", "permuted") in names and ("x", "channels_last") not in names
    same = variants[[v.variant for v in variants].index("same tensor")]
    assert same.args[0] is same.args[1]
    assert torch.equal(x, torch.ones(4, 3)), "the caller's tensor changed"

    shared = torch.ones(4, 3)
    aliased = _program_stub(_MulAdd.make(), (shared, shared), {"x"})
    kinds = {v.kind for v in probes.choose_variants(aliased, (shared, shared), {}, {})}
    assert "aliased" not in kinds

    skipped = probes.choose_variants(distinct, (x, y), {}, probes.check_skip({"aliased", "size"}))
    assert not {v.kind for v in skipped} & {"aliased", "size"}


def test_variants_of_a_4d_input_and_a_python_scalar() -> None:
    import torch

    class Scale(torch.nn.Module):
        def forward(self, x: torch.Tensor, s: float) -> torch.Tensor:
            return x * s

    x = torch.randn(2, 3, 4, 4)
    program = _program_stub(Scale(), (x, 2.0), set())
    variants = {v.variant: v for v in probes.choose_variants(program, (x, 2.0), {}, {})}
    assert variants["channels_last"].args[0].is_contiguous(memory_format=torch.channels_last)
    assert variants["strided_slice"].args[0].stride()[-1] == 2
    assert variants["storage_offset"].args[0].storage_offset() == 1
    assert variants["size[0]=3"].args[0].shape == (3, 3, 4, 4)
    assert variants["size[0]=1"].risky
    assert variants["dtype=float16"].risky and variants["dtype=float64"].outside_contract
    assert variants["value=3.0"].args[1] == 3.0
    for variant in ("channels_last", "strided_slice", "storage_offset"):
        assert torch.equal(variants[variant].args[0], x)


_FAKE_CHILD = """
import io, json, os, signal, sys, time
import torch

answers = os.fdopen(os.dup(1), "wb")
requests = sys.stdin.buffer
while line := requests.readline():
    asked = json.loads(line)
    if asked.get("release"):
        answers.write(json.dumps({"done": True, "rss": 1}).encode() + b"\\n")
        answers.flush()
        continue
    request = torch.load(io.BytesIO(requests.read(asked["request_bytes"])), weights_only=False)
    for position, (index, checked) in enumerate(request["jobs"]):
        if index == 0 and not checked and CRASH:
            os.kill(os.getpid(), signal.SIGSEGV)
        if index == 2 and not checked and CRASH:
            time.sleep(600)
        saved = io.BytesIO()
        torch.save({"index": index, "checked": checked, "error": f"refused by {os.getpid()}"}, saved)
        answers.write(json.dumps({"job": position, "bytes": len(saved.getvalue())}).encode())
        answers.write(b"\\n" + saved.getvalue())
        answers.flush()
    answers.write(json.dumps({"done": True, "rss": 1}).encode() + b"\\n")
    answers.flush()
"""


def _fake_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash: bool) -> None:
    child = tmp_path / "child.py"
    child.write_text(f"CRASH = {crash}\n" + _FAKE_CHILD)
    monkeypatch.setattr(engine_process, "_CHILD", child)
    monkeypatch.setattr(engine_process, "_PROCESS", None)


def test_a_crash_or_a_hang_ends_the_child_not_the_probes(tmp_path: Path, monkeypatch) -> None:
    import torch

    _fake_child(tmp_path, monkeypatch, crash=True)

    class Double(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    x = torch.ones(3, 2)
    program = _program_stub(Double(), (x,), set())
    variants = probes.choose_variants(program, (x,), {}, {})[:3]
    results = probe_runner.run_child(program, variants, timeout=20)  # type: ignore[arg-type]
    assert results[(0, False)]["crashed"] == (
        f"the engine crashed the process (signal {signal.SIGSEGV.value})"
    )
    assert results[(1, False)]["error"].startswith("refused by ")
    assert results[(2, False)]["crashed"].startswith("the engine did not return within")
    for index in range(3):
        assert results[(index, True)] == {"crashed": "not run: the probes ran out of time"}
    assert engine_process.engine_child().starts == 2, "a crash and a hang each ended one child"
    engine_process.shutdown()


_QUIET_FAILURE_CHILD = """
import json, sys
count = 0
while line := sys.stdin.buffer.readline():
    sys.stdin.buffer.read(json.loads(line)["request_bytes"])
    count += 1
    if count == 1:
        sys.stderr.write("UserWarning: a note while the first program ran\\n")
        sys.stderr.flush()
        print(json.dumps({"done": True, "rss": 1}), flush=True)
    else:
        if LOUD:
            sys.stderr.write("RuntimeError: the second program's own error\\n")
            sys.stderr.flush()
        sys.exit(3)
"""


@pytest.mark.parametrize(
    ("loud", "why"),
    [
        (False, "the probe process failed: 3"),
        (True, "the probe process failed: RuntimeError: the second program's own error"),
    ],
)
def test_a_failure_quotes_only_what_its_own_program_wrote(
    tmp_path: Path, loud: bool, why: str
) -> None:
    child = tmp_path / "child.py"
    child.write_text(f"LOUD = {loud}\n" + _QUIET_FAILURE_CHILD)
    process = engine_process.EngineChild(child)
    try:
        assert process.run({"jobs": []}, timeout=30) == ([], None)
        assert process.run({"jobs": []}, timeout=30) == ([], why)
    finally:
        process.close()


def test_one_child_probes_program_after_program(tmp_path: Path, monkeypatch) -> None:
    import torch

    _fake_child(tmp_path, monkeypatch, crash=False)
    monkeypatch.setattr(engine_process, "PACKAGES_PER_CHILD", 3)

    class Double(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    x = torch.ones(3, 2)
    program = _program_stub(Double(), (x,), set())
    variants = probes.choose_variants(program, (x,), {}, {})[:2]
    pids = []
    for _ in range(4):
        for _ in range(2):  # requests of one program's check: one child
            results = probe_runner.run_child(program, variants, timeout=60)  # type: ignore[arg-type]
            assert len(results) == 4
            pids.append({result["error"] for result in results.values()})
        engine_process.release_engine()  # the check is done with its program
    assert all(len(seen) == 1 for seen in pids), "one child ran every job of a program"
    assert pids[0] == pids[1] == pids[4] == pids[5] != pids[6] == pids[7], (
        "three programs per child, then a new one"
    )
    process = engine_process.engine_child()._child.process
    assert process is not None and process.poll() is None
    engine_process.shutdown()  # returns at once: the child frees its engine and exits
    assert process.wait(timeout=10) is not None, "the session's end ends the child"


def test_outcomes_are_kept_next_to_the_package(tmp_path: Path) -> None:
    from pytest_aoti.cache.registry import ProgramRegistry
    from pytest_aoti.cache.store import ArtifactStore

    package = tmp_path / "package.pt2"
    package.write_bytes(b"not really a package")
    store = ArtifactStore(tmp_path / "cache")
    key = "a" * 40
    assert store.store(key, package, {"caller": "test"}) is not None
    assert store.read_sidecar(key, "probes") is None
    data = {"spec": {"outcomes": [{"input": "x", "variant": "channels_last", "max_abs": "inf"}]}}
    assert store.write_sidecar(key, "probes", data)
    assert store.read_sidecar(key, "probes") == data
    assert store.lookup(key) is not None, "the entry stays valid with a sidecar"
    assert not store.write_sidecar("b" * 40, "probes", data), "no entry, no sidecar"
    with pytest.raises(ValueError, match="bad sidecar name"):
        store.write_sidecar(key, "../meta", data)

    # a later session finds them through its registry; a corrupt file reads as none
    registry = ProgramRegistry(tmp_path / "work", ArtifactStore(tmp_path / "cache"))
    assert registry.attached(key, "probes") == data
    (tmp_path / "cache" / "v1" / "entries" / key / "probes.json").write_text("{not json")
    assert ArtifactStore(tmp_path / "cache").read_sidecar(key, "probes") is None
    assert registry.attached(key, "probes") == data, "kept for the session once read"
    registry.attach(key, "probes", {"other": {}})
    assert ArtifactStore(tmp_path / "cache").read_sidecar(key, "probes") == {"other": {}}


class _KeptSidecars:
    """A cache's sidecar interface over a dict, with a JSON round trip like the store's."""

    def __init__(self) -> None:
        self.kept: dict[tuple[str, str], Any] = {}

    def attached(self, key: str, name: str) -> Any:
        return self.kept.get((key, name))

    def attach(self, key: str, name: str, data: Any) -> None:
        self.kept[(key, name)] = json.loads(json.dumps(dict(data)))


def _doubling_program() -> tuple[Any, Any, Any]:
    """A stub program of ``x * 2``, its module and its example input."""
    import torch

    class Double(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    x = torch.ones(3, 2)
    return _program_stub(Double(), (x,), set()), Double(), x


def _child_replaced(monkeypatch: pytest.MonkeyPatch, child: Any) -> None:
    """``child(program, variants, timeout, checked)`` answers the probes' requests."""
    monkeypatch.setattr(probes, "run_child", child)
    monkeypatch.setattr(probes, "start_child", child)
    monkeypatch.setattr(probes, "child_results", lambda answered: answered)


def test_cached_outcomes_call_no_engine(tmp_path: Path, monkeypatch) -> None:
    from pytest_aoti.tolerance import Tolerance

    program, double, x = _doubling_program()
    cache = _KeptSidecars()
    calls = []

    def fake_child(
        program: Any, variants: list[Any], timeout: float, checked: Any = (False, True)
    ) -> dict[Any, Any]:
        calls.append(len(variants))
        return {
            (index, checked): {"error": "refused"}
            for index in range(len(variants))
            for checked in (False, True)
        }

    _child_replaced(monkeypatch, fake_child)
    first, _ = probes.run_probes(program, double, (x,), {}, tolerance=Tolerance(), cache=cache)
    again, _ = probes.run_probes(program, double, (x,), {}, tolerance=Tolerance(), cache=cache)
    assert len(calls) == 1 and not first.cached and again.cached
    assert again.outcomes == first.outcomes and {o.outcome for o in first.outcomes} == {"refused"}
    other, _ = probes.run_probes(
        program, double, (x,), {}, tolerance=Tolerance(atol=1.0), cache=cache
    )
    assert len(calls) == 2 and not other.cached, "another tolerance probes again"


def test_only_a_variant_the_engine_gets_wrong_runs_again_with_input_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first request runs every variant unchecked; the second, checked, only the one
    whose answer differs from eager's: ``refused_with_checks`` is the hazard's alone."""
    import torch

    from pytest_aoti.probes import runner as probe_runner
    from pytest_aoti.tolerance import Tolerance

    program, double, x = _doubling_program()
    program.scalar_output_dtypes = ()  # its output is a tensor
    asked: list[tuple[int, tuple[bool, ...]]] = []

    def child(program: Any, variants: list[Any], timeout: float, checked: Any) -> Any:
        asked.append((len(variants), tuple(checked)))
        results: dict[Any, Any] = {}
        for index, variant in enumerate(variants):
            [tensor] = probe_runner._flat_tensors(program, variant)
            wrong = variant is first_variant[0]
            answer = {"outputs": tensor * (3 if wrong else 2), "inputs": [tensor]}
            for with_checks in checked:
                results[(index, with_checks)] = {"error": "refused"} if with_checks else answer
        return results

    first_variant: list[Any] = []
    chosen = probes.choose_variants

    def variants_noted(*args: Any, **kwargs: Any) -> Any:
        made = chosen(*args, **kwargs)
        first_variant.append(made[0])
        return made

    monkeypatch.setattr(probes, "choose_variants", variants_noted)
    _child_replaced(monkeypatch, child)
    report, variants = probes.run_probes(program, double, (x,), {}, tolerance=Tolerance())
    assert not report.error, report.error
    [first, *others] = report.outcomes
    assert asked == [(len(report.outcomes), (False,)), (1, (True,))]
    assert first.outcome in ("wrong", "unguarded") and first.refused_with_checks is True
    assert others and all(o.outcome == "ok" and o.refused_with_checks is None for o in others)
    assert torch.equal(x, torch.ones(3, 2))


def test_outcomes_of_a_probe_run_out_of_time_are_not_kept(tmp_path: Path, monkeypatch) -> None:
    """A variant not run in time says nothing about the package: the next run probes again."""
    from pytest_aoti.tolerance import Tolerance

    program, double, x = _doubling_program()
    cache = _KeptSidecars()

    def late_child(
        program: Any, variants: list[Any], timeout: float, checked: Any = (False, True)
    ) -> dict[Any, Any]:
        results: dict[Any, Any] = {
            (index, checked): {"error": "refused"}
            for index in range(len(variants))
            for checked in (False, True)
        }
        results[(0, False)] = {"crashed": "not run: the probes ran out of time"}
        return results

    _child_replaced(monkeypatch, late_child)
    first, _ = probes.run_probes(program, double, (x,), {}, tolerance=Tolerance(), cache=cache)
    assert any(o.detail.startswith("not run:") for o in first.outcomes)
    assert cache.kept == {}
    again, _ = probes.run_probes(program, double, (x,), {}, tolerance=Tolerance(), cache=cache)
    assert not again.cached


@pytest.mark.parametrize(
    ("message", "poisons"),
    [
        ("CUDA error: an illegal memory access was encountered", True),
        ("input_handles[0]: unmatched stride value at 1, expected: 64, but got: 1", False),
    ],
)
def test_a_cuda_error_ends_the_probe_child_instead_of_reading_as_refused(
    monkeypatch: pytest.MonkeyPatch, message: str, poisons: bool
) -> None:
    """A CUDA error sticks to the process, so every later job would read as refused: the
    child ends (the parent records a crash and starts a fresh child); an ordinary refusal
    is the job's answer."""
    import torch

    from pytest_aoti.isolation import child as probe_child

    class Loader:
        def __init__(self, *args: Any) -> None:
            pass

        def boxed_run(self, inputs: list[Any]) -> list[Any]:
            raise RuntimeError(message)

    def exit_now(code: int) -> None:
        raise SystemExit(code)

    monkeypatch.setattr(torch._C._aoti, "AOTIModelPackageLoader", Loader)
    monkeypatch.setattr(probe_child.os, "_exit", exit_now)
    monkeypatch.setattr(probe_child, "_HELD", {})  # no engine held from another test
    request = {
        "package": "p.pt2",
        "device_index": None,
        "inputs": [[torch.ones(2)]],
        "jobs": [(0, False)],
    }
    answers = io.BytesIO()
    if poisons:
        with pytest.raises(SystemExit) as exited:
            probe_child.probe(request, answers)
        assert exited.value.code == 70
        assert answers.getvalue() == b"", "no result for the job it ended in"
    else:
        probe_child.probe(request, answers)
        line, _, payload = answers.getvalue().partition(b"\n")
        assert json.loads(line) == {"job": 0, "bytes": len(payload)}
        saved = torch.load(io.BytesIO(payload), weights_only=False)
        assert saved["error"].startswith("input_handles[0]: unmatched stride")
