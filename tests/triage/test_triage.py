"""Triage of a failed check end to end: the stage that broke it, the first diverging node
at the user's line, and a repro bundle that runs with plain torch in a fresh process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from listings import LISTINGS, assert_listing

LISTING = LISTINGS / "compile-failure.txt"
"""The failure report the README and the failures page show; this file's first test writes
it again with ``AOTI_REGENERATE_LISTINGS=1`` and fails where its wording has drifted."""

TRIAGE_TESTS = """
from torch._inductor.custom_graph_pass import CustomGraphPass


class SwapFirstMul(CustomGraphPass):
    # an Inductor pass that breaks the engine at one known node: a * 3 becomes a + 3;
    # its uuid() gives it an identity across processes, so the suite's shared cache
    # serves the program it compiles to every inner session after the first

    def __call__(self, graph):
        for node in graph.nodes:
            if node.op == "call_function" and node.target is torch.ops.aten.mul.Tensor:
                node.target = torch.ops.aten.add.Tensor
                return

    def uuid(self):
        return "test_triage.SwapFirstMul-1"


swap_first_mul = SwapFirstMul()


class SinTimesThree(torch.nn.Module):
    def forward(self, x):
        a = x.sin()
        b = a * 3  # the node the pass breaks
        return b.cos() + 1, a.sum()


def test_compile_stage(aoti):
    with pytest.raises(AotiCheckError) as excinfo:
        aoti.check(
            SinTimesThree(),
            (example(),),
            inductor_configs={"post_grad_custom_post_pass": swap_first_mul},
        )
    error = excinfo.value
    assert error.stage == "compile"
    assert error.kind == "output"
    assert error.node.op == "aten.mul.Tensor"
    assert error.node.source.text == "b = a * 3  # the node the pass breaks"
    assert error.finding.figures.mismatched == 6
    raise error


def test_export_stage(aoti):
    with pytest.raises(AotiCheckError) as excinfo:
        aoti.check(OffWhenCompiled(), (example(),))
    assert excinfo.value.stage == "export"
    assert excinfo.value.node is None
    raise excinfo.value


def test_localize_off(aoti):
    with pytest.raises(AotiCheckError) as excinfo:
        aoti.check(
            SinTimesThree(),
            (example(),),
            inductor_configs={"post_grad_custom_post_pass": swap_first_mul},
        )
    assert excinfo.value.stage == "compile"
    assert excinfo.value.node is None
"""


@pytest.mark.compiles
def test_stage_node_and_repro_bundle(
    run_aoti, run_isolated, pytester: pytest.Pytester, tmp_path: Path
) -> None:
    bundles = tmp_path / "failed"
    result = run_aoti(TRIAGE_TESTS, f"--aoti-keep-failed={bundles}", "-k", "not localize_off")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_compile_stage*",
            "E * the AOTI compile broke it: output[[]0] differs between eager and the AOTI "
            "engine: 6 of 6 elements beyond *",
            "E *stage: compile: the exported and the decomposed programs match eager; only the "
            "AOTI engine differs",
            "E *first diverging node: mul* = aten.mul.Tensor(*",
            "E *at *test_inner.py:* in forward: b = a * 3  # the node the pass breaks",
            "E *repro bundle: *test_inner.py__test_compile_stage-cpu-*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*test_export_stage*",
            "E * torch.export broke it: output differs between eager and the AOTI engine: *",
            "E *stage: export: the exported program (exported.module(), no compile) already "
            "differs from eager",
        ]
    )
    compare_listing(
        result.stdout.lines, {str(tmp_path): "/tmp/demo", str(pytester.path): "/tmp/demo"}
    )
    folders = sorted(path.name for path in bundles.iterdir())
    assert folders == [
        "test_inner.py__test_compile_stage-cpu-",
        "test_inner.py__test_export_stage-cpu-",
    ]
    compile_bundle = bundles / folders[0]
    finding = json.loads((compile_bundle / "finding.json").read_text())
    assert finding["stage"] == "compile"
    assert finding["node"]["op"] == "aten.mul.Tensor"

    # the repro needs only torch: run it in a fresh, isolated interpreter elsewhere
    for folder, expected_line in [
        (compile_bundle, "REPRODUCED"),
        (bundles / folders[1], "REPRODUCED"),
    ]:
        run = run_isolated(folder / "repro.py", tmp_path)
        assert run.returncode == 1, run.stdout + run.stderr
        assert expected_line in run.stdout


def compare_listing(lines: list[str], paths: dict[str, str]) -> None:
    """The compile failure's ``E`` lines against the kept listing (paths made neutral)."""
    start = next(i for i, line in enumerate(lines) if "the AOTI compile broke it: output" in line)
    end = next(i for i in range(start, len(lines)) if "repro bundle:" in lines[i]) + 1
    listing = []
    for line in lines[start:end]:
        for real, shown in sorted(paths.items(), key=lambda item: -len(item[0])):
            line = line.replace(real, shown)
        listing.append(line)
    assert_listing(listing, LISTING)


@pytest.mark.compiles
def test_localize_off_names_no_node(run_aoti) -> None:
    result = run_aoti(TRIAGE_TESTS, "--aoti-localize=off", "-k", "localize_off")
    result.assert_outcomes(passed=1)


def test_unwritable_keep_failed_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    blocker = pytester.path / "a-file"
    blocker.write_text("")
    result = pytester.runpytest(f"--aoti-keep-failed={blocker / 'bundles'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--aoti-keep-failed=*a-file/bundles: */a-file is a file, not a directory; *"]
    )
