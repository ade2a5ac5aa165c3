"""Dynamic shapes end to end: generated shapes inside the exported ranges, one compile,
shrunk failures, inferred specs, derived dims and out-of-range inputs."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import pytest

DYNAMIC_MODELS = """
from torch.export import Dim

SEEN_SHAPES = []


class RowScale(torch.nn.Module):
    def forward(self, x, scale):
        if not torch.compiler.is_exporting():
            SEEN_SHAPES.append(tuple(x.shape))
        return x * scale + x.sum(dim=0)


class WrongAtOddBatch(torch.nn.Module):
    # the engine adds 1 wherever the batch is odd; eager never does
    def forward(self, x):
        y = x * 2
        if torch.compiler.is_exporting():
            y = y + x.shape[0] % 2
        return y


class Attention(torch.nn.Module):
    def forward(self, q, k, mask):
        return torch.softmax(q @ k.transpose(-1, -2) + mask, dim=-1)


class Derived(torch.nn.Module):
    def forward(self, x, y, z):
        if not torch.compiler.is_exporting():
            SEEN_SHAPES.append((x.shape[0], y.shape[0], z.shape[0]))
        return x.view(2, -1, 4).sum(dim=0) + y + z[1:]


BATCH = Dim("batch", min=2, max=48)
"""


@contextlib.contextmanager
def hypothesis_profile_restored() -> Iterator[None]:
    """Load the active Hypothesis profile again afterwards. Hypothesis keeps its name in a
    private attribute (``settings._current_profile``, stable across 6.x)."""
    from hypothesis import settings

    name = settings._current_profile
    try:
        yield
    finally:
        settings.load_profile(name)


@pytest.mark.compiles
def test_correct_dynamic_model_passes_generated_shapes_with_one_compile(run_aoti):
    result = run_aoti(
        DYNAMIC_MODELS
        + """
def test_generated(aoti, record_property):
    result = aoti.check(
        RowScale(),
        (torch.randn(4, 3), torch.randn(3)),
        dynamic_shapes=({0: BATCH}, None),
        examples=20,
        probes="off",  # deployment probes call forward outside the range on purpose
    )
    assert result.examples >= 20
    assert len(set(SEEN_SHAPES)) >= 10, SEEN_SHAPES
    assert all(2 <= rows <= 48 and cols == 3 for rows, cols in SEEN_SHAPES)
    assert {rows for rows, _ in SEEN_SHAPES} >= {2, 48}, "boundaries are checked"
"""
    )
    result.assert_outcomes(passed=1)
    result.stdout.re_match_lines([r"aoti: 1 program; \d+ compiled .*; \d+ loaded"])
    line = next(line for line in result.outlines if line.startswith("aoti: 1 program"))
    compiled, loaded = map(int, re.findall(r"(\d+) (?:compiled|loaded)", line))
    assert compiled + loaded == 1, line


@pytest.mark.compiles
def test_wrong_at_some_sizes_is_found_and_shrunk(run_aoti):
    result = run_aoti(
        DYNAMIC_MODELS
        + """
def test_odd(aoti):
    aoti.check(WrongAtOddBatch(), (torch.randn(4, 3),), dynamic_shapes=({0: BATCH},))
"""
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E * generated shape fails: x=(3, 3)",
            "E *x.shape[[]0[]] = 3  (batch, exported range [[]2, 48[]])",
            "E *values seed *; replay: *",
            "E *first difference: output differs between eager and the AOTI engine "
            "(generated x=(3, 3)): 9 of 9 elements beyond *",
        ]
    )


@pytest.mark.compiles
def test_failing_shape_is_tried_first_next_run(run_aoti, pytester):
    source = (
        DYNAMIC_MODELS
        + """
def test_odd(aoti):
    aoti.check(WrongAtOddBatch(), (torch.randn(4, 3),), dynamic_shapes=({0: BATCH},))
"""
    )
    run_aoti(source).assert_outcomes(failed=1)
    assert list((pytester.path / ".pytest_cache" / "d" / "aoti-hypothesis").iterdir())
    # the second run generates nothing: only the saved shape, replayed from the example
    # database, can fail it (the exported boundaries 2 and 48 are even and pass)
    pytester.makeconftest(
        """
        from hypothesis import Phase, settings

        settings.register_profile("replay-only", phases=[Phase.explicit, Phase.reuse])
        settings.load_profile("replay-only")
        """
    )
    with hypothesis_profile_restored():  # the inner conftest loads its profile globally
        again = run_aoti(source)
        again.assert_outcomes(failed=1)
        again.stdout.fnmatch_lines(["E * generated shape fails: x=(3, 3)"])
        # without the database, the same replay-only run passes: the failure came from it
        run_aoti(source, "-p", "no:cacheprovider").assert_outcomes(passed=1)


@pytest.mark.compiles
def test_auto_infers_shared_batch_and_independent_sequence(run_aoti):
    result = run_aoti(
        DYNAMIC_MODELS
        + """
def sample(batch, seq):
    return (torch.randn(batch, seq, 8), torch.randn(batch, seq, 8), torch.zeros(batch, 1, seq))

def test_auto(aoti):
    result = aoti.check(
        Attention(),
        sample(2, 5),
        dynamic_shapes="auto",
        samples=[sample(3, 7), sample(5, 4)],
        examples=10,
    )
    q, k, mask = result.dynamic_shapes
    assert q[0] is k[0] is mask[0]
    assert q[1] is k[1] is mask[2]
    assert q[0] is not q[1]
    assert q[2] == k[2] == mask[1] == Dim.STATIC
    assert result.examples >= 10
""",
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*aoti: inferred dynamic_shapes*",
            "test_inner.py::test_auto[[]cpu[]]:",
            '    batch = Dim("batch", min=2)',
            '    q_dim1 = Dim("q_dim1", min=2)',
            "    dynamic_shapes = (",
            "        {0: batch, 1: q_dim1, 2: Dim.STATIC},",
        ]
    )


@pytest.mark.compiles
def test_derived_dims_hold_in_every_generated_shape(run_aoti):
    result = run_aoti(
        DYNAMIC_MODELS
        + """
def test_derived(aoti):
    d = Dim("d", min=2, max=16)
    result = aoti.check(
        Derived(),
        (torch.randn(8, 4), torch.randn(4, 4), torch.randn(5, 4)),
        dynamic_shapes=({0: 2 * d}, {0: d}, {0: d + 1}),
        examples=15,
        probes="off",  # deployment probes call forward outside the ranges on purpose
    )
    assert result.examples >= 15
    assert len(set(SEEN_SHAPES)) >= 5
    assert all(x == 2 * y and z == y + 1 and 2 <= y <= 16 for x, y, z in SEEN_SHAPES)
"""
    )
    result.assert_outcomes(passed=1)


@pytest.mark.compiles
def test_out_of_range_input_is_refused_and_the_process_survives(run_aoti):
    result = run_aoti(
        DYNAMIC_MODELS
        + """
from pytest_aoti import AotiInputError

def test_out_of_range(aoti):
    program = aoti.compile(
        RowScale(), (torch.randn(4, 3), torch.randn(3)), dynamic_shapes=({0: BATCH}, None)
    )
    with pytest.raises(AotiInputError, match=r"input 'x' dim 0 is 600, outside the exported range \\[2, 48\\]"):
        program(torch.randn(600, 3), torch.randn(3))
    with pytest.raises(AotiInputError, match=r"input 'x' dim 0 is 1, outside"):
        program(torch.randn(1, 3), torch.randn(3))
    with pytest.raises(AotiInputError, match=r"input 'x'.*float64"):
        program(torch.randn(4, 3, dtype=torch.float64), torch.randn(3))
    out = program(torch.ones(5, 3), torch.ones(3))
    assert out.shape == (5, 3)

def test_process_still_alive():
    pass
"""
    )
    result.assert_outcomes(passed=2)


@pytest.mark.compiles
def test_hypothesis_seed_replays_the_search(run_aoti, pytester):
    """The seed the report gives replays the same search: the same shapes in the same
    order; another seed tries others."""
    source = (
        DYNAMIC_MODELS
        + """
import pathlib

SEEN = []

class Recorder(torch.nn.Module):
    def forward(self, x):
        if not torch.compiler.is_exporting():
            SEEN.append(x.shape[0])
        return x * 3

def test_search(aoti):
    # probes="off": deployment probes call forward too, once per program (then cached)
    aoti.check(
        Recorder(), (torch.randn(4, 3),), dynamic_shapes=({0: BATCH},), examples=10, probes="off"
    )
    pathlib.Path("seen.txt").write_text(repr(SEEN))
"""
    )
    # Hypothesis' "ci" profile (loaded where CI is set) derandomizes: no seed would matter
    pytester.makeconftest(
        """
        from hypothesis import settings

        settings.register_profile("seeded", derandomize=False)
        settings.load_profile("seeded")
        """
    )
    searches = []
    with hypothesis_profile_restored():  # the inner conftest loads its profile globally
        for seed in (1234, 1234, 99):
            # no cache provider: no example database, every run searches afresh
            run_aoti(source, f"--hypothesis-seed={seed}", "-p", "no:cacheprovider").assert_outcomes(
                passed=1
            )
            searches.append((pytester.path / "seen.txt").read_text())
    assert searches[0] == searches[1]
    assert searches[0] != searches[2]


@pytest.mark.compiles
def test_one_engine_serves_every_generated_shape(run_aoti):
    # each aoti_load_package maps a copy of the package that torch never frees: a check
    # must not load one per generated input set
    result = run_aoti(
        DYNAMIC_MODELS
        + """
import pytest_aoti.compiling.program

@pytest.fixture
def loads(monkeypatch):
    count = []
    original = pytest_aoti.compiling.program.load_engine
    monkeypatch.setattr(
        pytest_aoti.compiling.program, "load_engine", lambda *a, **k: count.append(1) or original(*a, **k)
    )
    return count

def test_stateless_program(aoti, loads):
    result = aoti.check(
        RowScale(), (torch.randn(4, 3), torch.randn(3)), dynamic_shapes=({0: BATCH}, None), examples=10
    )
    assert result.examples >= 10
    assert len(loads) == 1  # a small package: one engine in this process made every call

def test_stateless_program_served(aoti, loads, monkeypatch):
    monkeypatch.setattr("pytest_aoti.checks.base.SERVED_FROM_BYTES", 0)  # a large one's way
    result = aoti.check(
        RowScale(), (torch.randn(4, 3), torch.randn(3)), dynamic_shapes=({0: BATCH}, None), examples=10
    )
    assert result.examples >= 10
    assert len(loads) == 0  # the engine child's one engine answered every call

def test_generated_shapes_reach_the_child_in_batches(aoti, monkeypatch):
    import pytest_aoti.isolation.process as process

    jobs_per_request = []
    original = process.PendingJobs.__init__

    def counted(self, request, jobs, *args, **kwargs):
        jobs_per_request.append(len(jobs))
        original(self, request, jobs, *args, **kwargs)

    monkeypatch.setattr(process.PendingJobs, "__init__", counted)
    result = aoti.check(
        RowScale(),
        (torch.randn(4, 3), torch.randn(3)),
        dynamic_shapes=({0: BATCH}, None),
        examples=16,
        values="off",
        probes="off",
    )
    assert result.examples >= 16
    # the search's 16 shapes: two requests of eight, not sixteen of one
    assert jobs_per_request.count(8) == 2, jobs_per_request

def test_buffer_program_gets_a_fresh_engine_per_input_set(aoti, loads):
    from pytest_aoti.values.check import STATEFUL_DRAWS

    aoti.check(Counter(), (example(),), calls=1)
    # the example, each values draw and the C++ loader's first call from the exported
    # state: a fresh engine each, the draws capped
    assert len(loads) == 2 + STATEFUL_DRAWS
    aoti.check(Counter(), (example(),), calls=1)
    # the same example again: the draws it passed are kept, only the example and the C++
    # loader's call run
    assert len(loads) == 2 + STATEFUL_DRAWS + 2
"""
    )
    result.assert_outcomes(passed=4)
