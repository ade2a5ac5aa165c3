"""What the reports say about a check: its stage (one spelling in the text, the JSON report
and JUnit), figures that mean something (``n/a``, ``fp64 ok``, ``#2``), ``aoti.compile``
calls, progress lines on their own lines, and the one xdist payload."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
from section_lines import SectionLines

from pytest_aoti.cache.registry import CompileStats
from pytest_aoti.plugins import default_catalog
from pytest_aoti.reports.collector import ReportCollector, durations_table
from pytest_aoti.reports.junit import check_properties
from pytest_aoti.reports.progress import CompileEvent
from pytest_aoti.reports.records import CheckRecord, CompileRecord
from pytest_aoti.reports.terminal import problem_lines

RUN = default_catalog()
"""A run of every default plugin."""

# the engine adds 5e-5 to one of 1000 elements: beyond fp32's default tolerance, well
# within the fp64 rule (RMSE 1.6e-6 against eager's float64 run)
NEARLY = """
class NearlyWhenCompiled(torch.nn.Module):
    def forward(self, x):
        y = x * 3
        if torch.compiler.is_exporting():
            y = y + torch.nn.functional.pad(torch.full((1,), 5e-5), (0, 999))
        return y
"""

# run_decompositions refuses this (the GPT-2 Conv1D view after SDPA, AOTI-NOTES.md)
DECOMPOSE_FAILS = """
class Conv1D(torch.nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = torch.nn.Parameter(torch.randn(nx, nf))
        self.bias = torch.nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class Attention(torch.nn.Module):
    def __init__(self, channels=64, heads=4):
        super().__init__()
        self.channels, self.heads = channels, heads
        self.c_attn = Conv1D(3 * channels, channels)
        self.c_proj = Conv1D(channels, channels)

    def forward(self, x):
        q, k, v = self.c_attn(x).split(self.channels, dim=2)
        shape = (*q.shape[:-1], -1, self.channels // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        out = out.transpose(1, 2).contiguous()
        out = out.reshape(*out.shape[:-2], -1).contiguous()
        return self.c_proj(out)
"""


def _properties(xml: Path) -> dict[str, dict[str, list[str]]]:
    """``{test name: {property name: [values]}}`` of a JUnit file."""
    found: dict[str, dict[str, list[str]]] = {}
    for case in ElementTree.parse(xml).getroot().iter("testcase"):
        props = found.setdefault(case.get("name", ""), {})
        for prop in case.iter("property"):
            props.setdefault(prop.get("name", ""), []).append(prop.get("value", ""))
    return found


@pytest.mark.compiles
def test_stage_is_the_same_in_text_json_and_junit(
    run_aoti, pytester: pytest.Pytester, tmp_path: Path
) -> None:
    report = tmp_path / "stages.json"
    result = run_aoti(
        DECOMPOSE_FAILS
        + """
def test_decompose(aoti):
    with pytest.raises(Exception) as caught:
        aoti.check(Attention(), (torch.randn(2, 16, 64),))
    assert caught.value.stage == "decompose"
    raise caught.value

def test_expectation(aoti):
    aoti.check(DoubleThenCos(), (example(),), mutates={"x": example() * 3})
""",
        f"--aoti-report={report}",
        "--junitxml=stages.xml",
        "--aoti-localize=off",
    )
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["E *run_decompositions failed: Cannot view a tensor*"])
    checks = {
        check["test"].split("::")[1]: check for check in json.loads(report.read_text())["checks"]
    }
    assert checks["test_decompose[cpu]"]["finding"]["stage"] == "decompose"
    assert checks["test_decompose[cpu]"]["finding"]["kind"] == "decompose"
    assert checks["test_expectation[cpu]"]["finding"]["stage"] is None
    props = _properties(pytester.path / "stages.xml")
    assert props["test_decompose[cpu]"]["aoti_failure_stage"] == ["decompose"]
    assert props["test_expectation[cpu]"]["aoti_failure_kind"] == ["expectation"]
    assert "aoti_failure_stage" not in props["test_expectation[cpu]"]


@pytest.mark.compiles
def test_figures_tell_checks_apart_and_list_compile_only_tests(
    run_aoti, pytester: pytest.Pytester, tmp_path: Path
) -> None:
    report = tmp_path / "figures.json"
    result = run_aoti(
        """
def test_two(aoti):
    aoti.check(DoubleThenCos(), (example(),))
    aoti.check(DoubleThenCos(), (example() + 1,))

def test_compiles_only(aoti):
    program = aoti.compile(DoubleThenCos(), (example(),))
    assert program.mutated_inputs == {"x"}
""",
        f"--aoti-report={report}",
        "--junitxml=figures.xml",
    )
    result.assert_outcomes(passed=2)
    # a call of microseconds is too short to time: no ratio of two noises, and with no row
    # timed no engine/eager column. The rows are in order of their seconds, which the crash
    # screen's first child call may swap
    for row in ("test_two[[]cpu[]] (cpu)", "test_two[[]cpu[]] #2 (cpu)"):
        result.stdout.fnmatch_lines([f"* passed  test_inner.py::{row}"])
    rows = [line for line in result.stdout.lines if "passed  test_inner.py::test_two" in line]
    assert len(rows) == 2 and not any("n/a" in row for row in rows), rows
    assert "engine/eager" not in result.stdout.str()
    result.stdout.fnmatch_lines(["seconds*compile*shapes*err/tol*outcome*test"])
    document = json.loads(report.read_text())
    assert [check["check_index"] for check in document["checks"]] == [1, 2]
    assert all(check["engine_over_eager"] is None for check in document["checks"])
    (compiled,) = document["compiles"]
    assert compiled["test"] == "test_inner.py::test_compiles_only[cpu]"
    assert compiled["program"] == document["checks"][0]["program"]
    props = _properties(pytester.path / "figures.xml")
    assert props["test_two[cpu]"]["aoti_check_index"] == ["2"]
    assert props["test_compiles_only[cpu]"]["aoti_program"] == [compiled["program"]]


@pytest.mark.compiles
def test_a_check_passed_by_the_fp64_rule_says_so(run_aoti, tmp_path: Path) -> None:
    report = tmp_path / "fp64.json"
    result = run_aoti(
        NEARLY
        + """
def test_nearly(aoti):
    aoti.check(NearlyWhenCompiled(), (torch.ones(1000),))
""",
        f"--aoti-report={report}",
    )
    result.assert_outcomes(passed=1)
    (row,) = [line for line in result.stdout.lines if line.endswith("test_nearly[cpu] (cpu)")]
    assert row.split()[3:5] == ["fp64", "ok"] and " passed " in row, row
    (check,) = json.loads(report.read_text())["checks"]
    assert check["fp64_rescued"] is True
    assert check["tolerance_used"] > 1  # the figure stays in the JSON, with its flag


@pytest.mark.compiles
def test_progress_lines_start_on_a_line_of_their_own_with_q(run_aoti) -> None:
    result = run_aoti(
        NEARLY
        + """
def test_plain():
    pass

def test_fresh(aoti):
    aoti.check(NearlyWhenCompiled(), (torch.ones(1000) * 2,))
""",
        "-q",
        "--aoti-cache=off",  # a real compile, longer than the progress threshold
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            ".",  # test_plain's mark, ended before the progress line
            "aoti: compiling test_inner.py::test_fresh[[]cpu[]] (program *, cpu) ...",
            "aoti: compiled test_inner.py::test_fresh[[]cpu[]] (program *, cpu) in * s",
        ]
    )
    assert not any(".aoti:" in line for line in result.stdout.lines)


def _record(test: str, **fields: object) -> CheckRecord:
    base: dict[str, object] = dict(
        device="cpu",
        program="k",
        cache_hit=False,
        compile_seconds=0.0,
        original_compile_seconds=1.0,
    )
    return CheckRecord(test=test, **{**base, **fields})  # type: ignore[arg-type]


def test_table_cells_for_untimed_rescued_and_repeated_checks() -> None:
    rows = durations_table(
        [
            _record("short", check_seconds=3.0, engine_seconds=2e-5, eager_seconds=1e-5),
            _record("long", check_seconds=2.0, engine_seconds=2e-3, eager_seconds=1e-3),
            _record("rescued", check_seconds=1.0, tolerance_used=45.0, fp64_rescued=True),
            _record("again", check_seconds=0.5, check_index=2, tolerance_used=0.5),
            _record("broken", check_seconds=0.1, program="", outcome="failed"),
        ],
        limit=0,
    )
    cells = [row.split() for row in rows[1:]]
    assert cells[0][3:6] == ["-", "n/a", "passed"]
    assert cells[1][4] == "2.00"
    assert cells[2][3:5] == ["fp64", "ok"]
    assert cells[3][-3:] == ["again", "#2", "(cpu)"]
    assert cells[4][1:5] == ["-", "0", "-", "-"]


def test_a_ratio_is_a_figure_only_above_the_noise_floor_on_an_idle_machine() -> None:
    """Both medians at least 1 ms and a load below one per CPU, or no figure: the tiny BERT
    (0.38 ms against 111 ms) and the conv timed under load (74) read as broken."""
    records = [
        _record("bert", check_seconds=5.0, engine_seconds=3.8e-4, eager_seconds=0.111),
        _record(
            "conv",
            check_seconds=4.0,
            engine_seconds=0.074,
            eager_seconds=1e-3,
            timing_load=3.8,
            cache_hit=True,
        ),
        _record("idle", check_seconds=3.0, engine_seconds=2e-3, eager_seconds=0.4, timing_load=0.2),
    ]
    cells = [row.split() for row in durations_table(records, limit=0)[1:]]
    assert [row[4] for row in cells] == ["n/a", "busy", "0.005"]
    # without the one timed row, no row has a figure: the column is left out
    header, *untimed = durations_table(records[:2], limit=0)
    assert header.split() == ["seconds", "compile", "shapes", "err/tol", "outcome", "test"]
    assert [row.split()[4] for row in untimed] == ["passed", "passed"]
    assert [record.speed_ratio for record in records[:2]] == [None, None]
    assert records[0].to_json()["engine_over_eager"] is None
    assert records[1].to_json()["timing_load"] == 3.8


def test_the_summary_line_gives_the_load_time_measured_or_leaves_it_out() -> None:
    """A warm run's loads take milliseconds: the line gives them as measured, never as
    ``0.00 s``, also from an xdist worker; loads counted without a time (a shard's report
    that lacks it) leave the figure out."""

    def line(**fields: Any) -> str:
        return CompileStats(programs={"k"}, **fields).summary_line()

    assert line(loaded=31, load_seconds=0.0042) == (
        "aoti: 1 program; 0 compiled in 0.0 s; 31 loaded from cache in 4.2 ms"
    )
    assert line(loaded=1, load_seconds=0.0003).endswith("; 1 loaded from cache in 0.3 ms")
    assert line(loaded=5, load_seconds=0.41).endswith("; 5 loaded from cache in 0.41 s")
    assert line(loaded=2).endswith("; 0 compiled in 0.0 s; 2 loaded from cache")
    assert line(compiled=1, compile_seconds=14.1).endswith(
        "; 1 compiled in 14.1 s; 0 loaded from cache in 0.00 s"
    )
    worker = CompileStats(programs={"k"}, loaded=1, load_seconds=0.0003)
    controller = ReportCollector()
    controller.merge(ReportCollector().payload(worker, []))
    assert controller.totals(None).summary_line().endswith("; 1 loaded from cache in 0.3 ms")


def test_junit_leaves_out_an_absent_stage() -> None:
    finding = {"kind": "expectation", "message": "wrong", "stage": None}
    names = [
        name for name, _ in check_properties(_record("t", outcome="failed", finding=finding), RUN)
    ]
    assert "aoti_failure_kind" in names and "aoti_failure_stage" not in names
    staged = _record("t", outcome="failed", finding={**finding, "stage": "decompose"})
    assert ("aoti_failure_stage", "decompose") in check_properties(staged, RUN)


def test_one_worker_payload_merges_in_one_place() -> None:
    worker = ReportCollector()
    worker.records.append(_record("a", worker="gw0"))
    worker.compiles.append(CompileRecord("b", "cpu", "k2", True, 0.0, 2.0, worker="gw0"))
    worker.inferred.append(("a", "{'x': {0: Dim('batch')}}"))
    worker.cache_problem("entry k3 changed; recompiling")
    stats = CompileStats(programs={"k", "k2"}, compiled=1, compile_seconds=3.0, loaded=1)
    payload = worker.payload(stats, [CompileEvent("a", "k", "cpu", 3.0, "gw0")])
    json.dumps(payload)  # plain data: what execnet carries

    controller = ReportCollector()
    controller.cache_problem("entry k3 changed; recompiling")
    controller.merge(payload)
    controller.merge(payload)  # a second worker that used the same programs
    assert [record.test for record in controller.records] == ["a", "a"]
    assert [record.program for record in controller.compiles] == ["k2", "k2"]
    assert controller.cache_problems == ["entry k3 changed; recompiling"]
    assert len(controller.inferred) == 2 and len(controller.worker_events) == 2
    totals = controller.totals(CompileStats(programs={"k"}, loaded=1))
    assert totals.programs == {"k", "k2"}
    assert (totals.compiled, totals.compile_seconds, totals.loaded) == (2, 6.0, 3)


def test_notes_travel_in_the_worker_payload_and_show_once() -> None:
    worker = ReportCollector()
    record = _record("a", worker="gw0")
    record.notes = ["the program mutates registered buffers ['count']"]
    worker.records.append(record)
    worker.note("the program mutates registered buffers ['count']")
    worker.note("the program mutates registered buffers ['count']")  # once each
    payload = worker.payload(CompileStats(), [])
    json.dumps(payload)

    controller = ReportCollector()
    controller.merge(payload)
    controller.merge(payload)  # another worker said the same
    assert controller.notes == ["the program mutates registered buffers ['count']"]
    assert [r.notes for r in controller.records] == [record.notes, record.notes]

    from pytest_aoti.reports.terminal import write_summary

    reporter = SectionLines()
    write_summary(reporter, controller, CompileStats(), durations=-1, report=None)
    at = reporter.lines.index("--- aoti: notes (not failures)")
    assert reporter.lines[at + 1 :] == ["the program mutates registered buffers ['count']"]


def test_reports_of_one_cache_problem_are_one_line_with_a_count() -> None:
    """A cache folder removed during a run fails every entry alike: one line, not nine."""
    gone = [
        f"pytest-aoti cache entry {index:02x}{'ab' * 15} not used: missing: "
        f"/tmp/cache/v1/entries/{index:02x}/package.pt2; removed it"
        for index in range(9)
    ]
    other = "pytest-aoti cache off for this run: read-only file system"
    lines = problem_lines([*gone, other, gone[0]])
    assert lines == [f"{gone[0]} (and 9 more like it)", other]
    assert problem_lines(gone[:1]) == gone[:1]
