"""The verdict at its edges: random programs, eager errors, bool outputs, refused shapes,
strict-warning suites, Inductor config keys, zero tolerances."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

RANDOM_MODELS = """
class Noisy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(x) * 2, x + 1


def noisy_input():
    return torch.ones(8, 16)
"""


def test_a_random_program_fails_before_any_compile_in_every_session(
    run_aoti: Callable[..., pytest.RunResult],
) -> None:
    source = (
        RANDOM_MODELS
        + """
def test_train_mode(aoti):
    aoti.check(Noisy(), (noisy_input(),))
"""
    )
    for _ in range(2):  # the verdict is read from the exported graph, every session
        result = run_aoti(source)
        result.assert_outcomes(failed=1)
        result.stdout.fnmatch_lines(
            [
                "*AotiCheckError: the program draws random numbers "
                "(aten.dropout.default): eager and the AOTI engine draw different ones*",
                "*random op aten.dropout.default (node *) at test_inner.py:* in forward: "
                "return self.drop(x) * 2*",
                "*call model.eval() before the check*",
            ]
        )
    assert "compiled in" not in result.stdout.str()  # failed before any compile


@pytest.mark.compiles
def test_random_shapes_compares_shapes_and_the_deterministic_outputs(
    run_aoti: Callable[..., pytest.RunResult],
) -> None:
    result = run_aoti(
        RANDOM_MODELS
        + """
from pytest_aoti.compiling.random_ops import random_outputs

def test_shapes(aoti):
    result = aoti.check(Noisy(), (noisy_input(),), random="shapes")
    # only the deterministic output x + 1 was compared by value
    assert [leaf.location for _, leaf in result.stats] == ["output[1]"]
    assert random_outputs(result.program.exported) == [True, False]

@pytest.mark.aoti(random="shapes")
def test_marker(aoti):
    aoti.check(Noisy(), (noisy_input(),))

def test_eval_mode_is_not_random(aoti):
    aoti.check(Noisy().eval(), (noisy_input(),))

def test_bad_mode(aoti):
    aoti.check(Noisy(), (noisy_input(),), random="values")
"""
    )
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*random must be one of 'fail', 'shapes', got 'values'*"])


def test_eager_errors_fail_first_without_a_compile(
    run_aoti: Callable[..., pytest.RunResult], tmp_path: Path
) -> None:
    report = tmp_path / "report.json"
    result = run_aoti(
        """
def test_int_input(aoti):
    aoti.check(torch.nn.Linear(4, 2), (torch.ones(3, 4, dtype=torch.int64),))

def test_float64_module(aoti):
    aoti.check(torch.nn.Linear(4, 2).double(), (torch.ones(3, 4),))
""",
        f"--aoti-report={report}",
    )
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*eager PyTorch fails on the example: the module raised on the example inputs: "
            "RuntimeError: *",
            "*nothing was exported or compiled*",
            "*stage: eager: the module fails in eager PyTorch, before any export or compile*",
        ]
    )
    assert "compiled in" not in result.stdout.str()
    records = json.loads(report.read_text())["checks"]
    assert [record["finding"]["stage"] for record in records] == ["eager", "eager"]
    assert {record["finding"]["kind"] for record in records} == {"eager"}


@pytest.mark.compiles
def test_a_python_bool_output_matches_the_engines_bool_tensor(
    run_aoti: Callable[..., pytest.RunResult],
) -> None:
    """PyTorch's test_symbool_item (test/inductor/test_aot_inductor.py)."""
    result = run_aoti(
        """
class Item(torch.nn.Module):
    def forward(self, tensor):
        return tensor.item()

def test_symbool_item(aoti):
    aoti.check(Item(), (torch.tensor([0], dtype=torch.bool),))
"""
    )
    result.assert_outcomes(passed=1)


BOOLEAN_INDEXING = """
from torch.export import Dim

class BooleanIndexing(torch.nn.Module):
    def forward(self, x, y, z, x1, z1):
        a = x[y]
        a1 = x1[y]
        b = torch.cat([a, z], dim=1)
        b1 = torch.cat([a1, z1], dim=1)
        return b, b1

def test_boolean_indexing(aoti):
    x = torch.randn(3, 5)
    y = torch.tensor([0, 1, 1], dtype=torch.bool)
    z = torch.randn(2, 4)
    x1 = torch.randn(3, 5)
    z1 = torch.randn(2, 4)
    dim0_s0 = Dim("dim0_s0", min=2, max=1024)
    dynamic_shapes = {"x": {0: dim0_s0}, "y": {0: dim0_s0}, "z": {}, "x1": {0: dim0_s0}, "z1": {}}
    aoti.check(BooleanIndexing(), (x, y, z, x1, z1), dynamic_shapes=dynamic_shapes)
"""


@pytest.mark.compiles
def test_a_refused_boundary_shape_is_an_export_finding(
    run_aoti: Callable[..., pytest.RunResult], tmp_path: Path
) -> None:
    """PyTorch's test_boolean_indexing with its declared ranges: the exported program
    itself asserts the count of True values (u0), which no values drawn at the largest
    boundary shape meet."""
    report = tmp_path / "report.json"
    result = run_aoti(BOOLEAN_INDEXING, f"--aoti-report={report}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*torch.export broke it: boundary shape refused by the exported program: "
            "x=(1024, 5), y=(1024,)*",
            "*at the exported boundary; values seed 0",
            "*the exported program (exported.module(), no compile) refuses it: RuntimeError: "
            "Runtime assertion failed for expression u0 *",
            "*depends on the input values*",
        ]
    )
    out = result.stdout.str() + result.stderr.str()
    assert "--hypothesis-seed" not in out
    assert "generated shape" not in out
    (record,) = json.loads(report.read_text())["checks"]
    assert record["finding"]["stage"] == "export"
    assert record["finding"]["extra"]["value_dependent"] is True


STATEFUL = """
def test_stateful(aoti):
    aoti.check(RunningMean(), (torch.randn(4, 2),))
"""


@pytest.mark.compiles
@pytest.mark.parametrize("strict", ["-W error", "ini"])
def test_a_stateful_check_passes_when_warnings_are_errors(
    run_aoti: Callable[..., pytest.RunResult], pytester: pytest.Pytester, strict: str
) -> None:
    if strict == "ini":
        pytester.makeini("[pytest]\nfilterwarnings =\n    error\n")
        args: tuple[str, ...] = ()
    else:
        args = ("-W", "error")
    result = run_aoti(STATEFUL, *args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*aoti: notes (not failures)*",
            "the program mutates registered buffers {'count', 'mean'}*",
        ]
    )


@pytest.mark.compiles
def test_the_thread_check_still_warns_about_buffers(
    run_aoti: Callable[..., pytest.RunResult],
) -> None:
    result = run_aoti(
        """
from pytest_aoti import AotiBufferMutationWarning

def test_threads(aoti):
    with pytest.warns(AotiBufferMutationWarning, match="not thread-safe"):
        with pytest.raises(AotiCheckError, match="not thread-safe"):
            aoti.check(Counter(), (example(),), calls=1, threads=2)
"""
    )
    result.assert_outcomes(passed=1)


@pytest.mark.compiles
def test_library_warnings_are_notes_and_user_warnings_follow_the_filters(
    run_aoti: Callable[..., pytest.RunResult], pytester: pytest.Pytester, shared_cache_dir: Path
) -> None:
    library = pytester.mkdir("site-packages") / "modellib"
    library.mkdir()
    (library / "__init__.py").write_text(
        textwrap.dedent(
            """
            import warnings
            import torch

            def layer(x):
                if torch.compiler.is_exporting():
                    warnings.warn("modellib traced", UserWarning)
                return x * 2
            """
        )
    )
    pytester.syspathinsert(library.parent)
    result = run_aoti(
        """
import warnings
import modellib

class UsesLibrary(torch.nn.Module):
    def forward(self, x):
        return modellib.layer(x) + 1

class WarnsWhenTraced(torch.nn.Module):
    def forward(self, x):
        if torch.compiler.is_exporting():
            warnings.warn("the user's own warning", UserWarning)
        return x - 1

def test_library(aoti):
    aoti.check(UsesLibrary(), (example(),))

def test_user(aoti):
    aoti.check(WarnsWhenTraced(), (example(),), strict=False)
""",
        "-W",
        "error",
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*UserWarning: the user's own warning*",
            "*aoti: notes (not failures)*",
            "UserWarning from *modellib*__init__.py:*: modellib traced",
        ]
    )
    # a warm rerun loads the program: its library's warning was said when it was compiled
    warm = pytester.runpytest(
        "--aoti-device=cpu", f"--aoti-cache-dir={shared_cache_dir}", "-W", "error", "-k", "library"
    )
    warm.assert_outcomes(passed=1)
    warm.stdout.fnmatch_lines(["aoti: 1 program; 0 compiled in *; 1 loaded from cache in *"])
    assert "modellib traced" not in warm.stdout.str() + warm.stderr.str()


def test_unknown_inductor_keys_are_usage_errors_before_compiling(
    run_aoti: Callable[..., pytest.RunResult],
) -> None:
    result = run_aoti(
        """
def test_call(aoti):
    aoti.check(torch.nn.ReLU(), (example(),), inductor_configs={"max_autotun": False})

@pytest.mark.aoti(inductor_configs={"freezin": False})
def test_marker(aoti):
    aoti.check(torch.nn.ReLU(), (example(),))
"""
    )
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*AotiUsageError: inductor_configs: unknown inductor option 'max_autotun' "
            "(did you mean max_autotune*",
            "*AotiUsageError: inductor_configs: unknown inductor option 'freezin' "
            "(did you mean freezing*",
        ]
    )
    assert "compiled in" not in result.stdout.str()


@pytest.mark.compiles
def test_a_zero_tolerance_failure_says_it_is_within_the_default(
    run_aoti: Callable[..., pytest.RunResult],
) -> None:
    result = run_aoti(
        """
class Tiny(torch.nn.Module):
    def forward(self, x):
        y = x * 3
        if torch.compiler.is_exporting():
            y = y + 2e-7
        return y

def test_zero(aoti):
    aoti.check(Tiny(), (example(),), rtol=0, atol=0)

def test_default(aoti):
    aoti.check(Tiny(), (example(),))
"""
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*torch.export broke it (within the dtype default (rtol=1.3e-06, atol=1e-05); "
            "you set zero): output*",
            "*stage: export: *; within the dtype default (rtol=1.3e-06, atol=1e-05); you set zero",
        ]
    )


# --- the same rules without a compile -----------------------------------------------------


def test_bool_leaves_compare_with_the_engines_0_dim_bool_tensor() -> None:
    import torch

    from pytest_aoti.compare import compare_leaf
    from pytest_aoti.errors import AotiCheckError

    compare_leaf(False, torch.tensor(False), location="output")
    compare_leaf(3, torch.tensor(3), location="output")
    with pytest.raises(AotiCheckError, match="eager True, engine False"):
        compare_leaf(True, torch.tensor(False), location="output")
    with pytest.raises(AotiCheckError, match="eager bool, engine Tensor"):
        compare_leaf(True, torch.tensor([True]), location="output")


def test_the_zero_tolerance_note_only_where_the_default_holds() -> None:
    import torch

    from pytest_aoti.compare import compare_leaf
    from pytest_aoti.errors import AotiCheckError
    from pytest_aoti.tolerance import Tolerance

    zero = Tolerance(rtol=0, atol=0)
    eager = torch.tensor([1.0, 2.0])
    with pytest.raises(AotiCheckError) as close:
        compare_leaf(eager, eager + torch.tensor([1.2e-7, 0.0]), location="output", tolerance=zero)
    note = "within the dtype default (rtol=1.3e-06, atol=1e-05); you set zero"
    assert close.value.finding.tolerance_note == note
    assert close.value.finding.to_json()["tolerance_note"] == note
    with pytest.raises(AotiCheckError) as far:
        compare_leaf(eager, eager + 1.0, location="output", tolerance=zero)
    assert far.value.finding.tolerance_note == ""
    with pytest.raises(AotiCheckError) as tight:
        compare_leaf(eager, eager + 5e-6, location="output", tolerance=Tolerance(atol=1e-6))
    assert tight.value.finding.tolerance_note.endswith("you set rtol=1.3e-06, atol=1e-06")


def test_random_ops_are_read_from_the_exported_graph() -> None:
    import torch

    from pytest_aoti.compiling.random_ops import random_ops, random_outputs

    class Mixed(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.drop = torch.nn.Dropout(0.2)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return self.drop(x) + torch.rand_like(x), x * 2

    x = torch.ones(2, 3)
    train = torch.export.export(Mixed(), (x,))
    ops = random_ops(train)
    assert [op.op for op in ops] == ["aten.dropout.default", "aten.rand_like.default"]
    assert ops[0].source.startswith("test_verdict.py:")
    assert ops[0].source.endswith("return self.drop(x) + torch.rand_like(x), x * 2")
    assert random_outputs(train) == [True, False]
    evaluated = torch.export.export(Mixed().eval(), (x,))
    assert [op.op for op in random_ops(evaluated)] == ["aten.rand_like.default"]

    class Plain(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.dropout(x, 0.5, training=False) + 1

    assert random_ops(torch.export.export(Plain(), (x,))) == []


def test_attention_without_dropout_is_not_random() -> None:
    import torch

    from pytest_aoti.compiling.random_ops import random_ops

    class Attention(torch.nn.Module):
        def __init__(self, p: float) -> None:
            super().__init__()
            self.p = p

        def forward(self, q: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=self.p)

    q = torch.randn(2, 4, 8)
    # torch tags the op nondeterministic_seeded for its dropout; dropout_p=0 draws nothing
    assert random_ops(torch.export.export(Attention(0.0), (q,))) == []
    drawn = random_ops(torch.export.export(Attention(0.1), (q,)))
    assert [op.op for op in drawn] == ["aten.scaled_dot_product_attention.default"]


def test_a_value_dependent_assertion_is_told_apart() -> None:
    import torch
    from torch.export import Dim

    from pytest_aoti.checks.refused import ExportedRefusals, Refusal, has_runtime_asserts

    class Pick(torch.nn.Module):
        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return torch.cat([x[mask], torch.ones(2, 1)], dim=1)

    d = Dim("d", min=2, max=64)
    mask = torch.tensor([True, False, True])
    exported = torch.export.export(
        Pick(), (torch.randn(3, 1), mask), dynamic_shapes=({0: d}, {0: d})
    )
    assert has_runtime_asserts(exported)
    check = ExportedRefusals(exported)
    accepted = (torch.randn(4, 1), torch.tensor([True, True, False, False]))
    assert check.refusal(accepted, {}) is None
    refusal = check.refusal((torch.randn(4, 1), torch.tensor([True, False, False, False])), {})
    assert refusal is not None and refusal.value_dependent
    assert "Runtime assertion failed for expression u0" in refusal.assertion

    def build(seed: int) -> tuple[tuple[torch.Tensor, ...], dict[str, torch.Tensor]]:
        generator = torch.Generator().manual_seed(seed)
        return (torch.randn(2, 1), torch.randint(0, 2, (2,), generator=generator).bool()), {}

    seed = check.accepted_seed(build, 0)  # other values are drawn until two are True
    assert bool(build(seed)[0][1].all())
    with pytest.raises(Refusal):  # no draw of 64 values has exactly two True values
        check.accepted_seed(
            lambda s: ((torch.randn(64, 1), torch.ones(64, dtype=torch.bool)), {}), 0
        )


def test_library_warnings_are_recorded_and_user_warnings_issued_again() -> None:
    import warnings

    from pytest_aoti.compiling.library_warnings import library_warnings_recorded

    notes: list[str] = []
    with pytest.warns(UserWarning, match="mine") as caught:
        with library_warnings_recorded(notes.append):
            warnings.warn_explicit("theirs", UserWarning, "/x/site-packages/lib/core.py", 3)
            warnings.warn_explicit("quiet", FutureWarning, "/x/site-packages/lib/core.py", 4)
            warnings.warn_explicit("mine", UserWarning, "/home/me/model.py", 12)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "ignored by the user", UserWarning)
        with library_warnings_recorded(notes.append):
            warnings.warn_explicit(
                "ignored by the user", UserWarning, "/x/site-packages/lib/core.py", 5
            )
    assert notes == ["UserWarning from /x/site-packages/lib/core.py:3: theirs"]
    assert [(w.filename, w.lineno) for w in caught] == [("/home/me/model.py", 12)]


def test_a_library_warning_raised_through_python_s_frames_is_said_at_the_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stacklevel that lands in ``contextlib.py`` names the library's line instead."""
    from pytest_aoti.compiling.library_warnings import library_warnings_recorded

    library = tmp_path / "site-packages"
    library.mkdir()
    (library / "noisylib.py").write_text(
        textwrap.dedent(
            """
            import contextlib
            import warnings

            @contextlib.contextmanager
            def noisy():
                warnings.warn("noisy library", UserWarning, stacklevel=2)  # contextlib's line
                yield

            def run():
                with noisy():
                    return 1
            """
        )
    )
    monkeypatch.syspath_prepend(str(library))
    import noisylib

    notes: list[str] = []
    with library_warnings_recorded(notes.append):
        noisylib.run()
    assert notes == [f"UserWarning from {library / 'noisylib.py'}:7: noisy library"], notes


def test_a_bad_random_option_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest("--aoti-random=values")
    result.stderr.fnmatch_lines(["*--aoti-random: expected one of fail, shapes, got 'values'*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
