"""On a machine with a GPU: a repro bundle of a CUDA engine with an injected fault reproduces
in a fresh process (``scripts/gpu-check`` runs this in its CUDA part; skipped elsewhere)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.compiles,
]

TESTS = Path(__file__).resolve().parents[1]


def source_of(module: str, name: str) -> str:
    """The inner test source ``name`` that ``tests/<module>`` runs on the CPU, read from that
    file's text: importing a test module of another folder by name would need its folder on
    ``sys.path``."""
    for node in ast.parse((TESTS / module).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == name for target in node.targets
        ):
            value = ast.literal_eval(node.value)
            assert isinstance(value, str), (module, name)
            return value
    raise AssertionError(f"tests/{module} defines no {name}")


FAULTY_ON_CUDA = """
from torch._inductor.custom_graph_pass import CustomGraphPass


class SwapFirstMul(CustomGraphPass):
    # breaks the engine at one known node: a * 3 becomes a + 3
    def __call__(self, graph):
        for node in graph.nodes:
            if node.op == "call_function" and node.target is torch.ops.aten.mul.Tensor:
                node.target = torch.ops.aten.add.Tensor
                return

    def uuid(self):
        return "test_cuda.SwapFirstMul-1"


class SinTimesThree(torch.nn.Module):
    def forward(self, x):
        a = x.sin()
        b = a * 3
        return b.cos() + 1


def test_compile_stage_on_cuda(aoti):
    aoti.check(
        SinTimesThree(),
        (example(),),
        inductor_configs={"post_grad_custom_post_pass": SwapFirstMul()},
    )
"""


def test_cuda_repro_bundle_reproduces(run_aoti, run_isolated, tmp_path: Path) -> None:
    bundles = tmp_path / "failed"
    result = run_aoti(FAULTY_ON_CUDA, "--aoti-device=cuda", f"--aoti-keep-failed={bundles}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["E * the AOTI compile broke it: output* differs *"])
    (bundle,) = list(bundles.iterdir())
    finding = json.loads((bundle / "finding.json").read_text())
    assert finding["stage"] == "compile"

    run = run_isolated(bundle / "repro.py", tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "REPRODUCED" in run.stdout


def test_input_forms_pass_on_cuda(run_aoti, tmp_path: Path) -> None:
    """A 0-dim position and temperature, a sliced and an expanded example and a Python float
    output pass the default check on CUDA engines, their draws laid out like the example."""
    forms = source_of("checks/test_input_forms.py", "FORMS")
    report = tmp_path / "aoti.json"
    result = run_aoti(forms, "--aoti-device=cuda", f"--aoti-report={report}")
    result.assert_outcomes(passed=5)
    checks = json.loads(report.read_text())["checks"]
    assert all(
        c["values"]["checked"] + c["values"]["refused"] == c["values"]["draws"] for c in checks
    )


def test_the_module_is_unchanged_and_precision_reported_on_cuda(run_aoti) -> None:
    """The caller's module after every kind of check on CUDA; a float16 program whose CUDA
    engine keeps float32 is reported as precision, and fails with precision="fail"."""
    unchanged = source_of("checks/test_input_forms.py", "UNCHANGED")
    keeps_float32 = source_of("precision/test_precision.py", "KEEPS_FLOAT32")
    result = run_aoti("import pytest_aoti\n" + unchanged, "--aoti-device=cuda")
    result.assert_outcomes(passed=4)
    result = run_aoti(keeps_float32, "--aoti-device=cuda", "--aoti-probes=off")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["E * precision: output*keeps float32 where eager rounds to float16*"]
    )
