"""The plugin as pytest sees it: options, marker, device parametrization, fixtures, hooks,
errors. No test here compiles a program except where a hook needs one."""

from __future__ import annotations

import os

import pytest
import torch


def test_marker_is_registered_for_strict_markers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.aoti(rtol=1e-3)
        def test_marked(aoti_device):
            assert aoti_device.type == "cpu"
        """
    )
    result = pytester.runpytest("--strict-markers", "--aoti-device=cpu")
    result.assert_outcomes(passed=1)
    help_result = pytester.runpytest("--markers")
    help_result.stdout.fnmatch_lines(["@pytest.mark.aoti(rtol=None, atol=None, *"])


def test_plugin_load_does_not_import_torch(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import sys

        def test_plain():
            assert "torch" not in sys.modules
        """
    )
    pytester.makeconftest(
        """
        import sys

        def pytest_sessionfinish(session):
            assert "torch" not in sys.modules, "loading pytest-aoti imported torch"
        """
    )
    result = pytester.runpytest_subprocess("-p", "aoti", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["aoti: device=auto, cache=readwrite at *"])
    assert result.ret == 0


def test_every_aoti_test_carries_its_device_in_the_id(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.aoti
        def test_marked_only():
            pass

        def test_uses_fixture(aoti):
            assert aoti.device.type == "cpu"

        def test_not_aoti():
            pass
        """
    )
    result = pytester.runpytest("--aoti-device=cpu", "-v")
    result.stdout.fnmatch_lines_random(
        [
            "*::test_marked_only[[]cpu[]] PASSED*",
            "*::test_uses_fixture[[]cpu[]] PASSED*",
            "*::test_not_aoti PASSED*",
        ]
    )


def test_fixture_use_alone_makes_an_aoti_test_for_dash_m(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_uses_fixture(aoti):
            pass

        def test_not_aoti():
            pass
        """
    )
    result = pytester.runpytest("--aoti-device=cpu", "-m", "aoti", "-v")
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["*::test_uses_fixture[[]cpu[]] PASSED*"])


def test_device_list_parametrizes_over_devices(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no GPU here: pretend one exists; nothing below touches it
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    pytester.makepyfile(
        """
        def test_device(aoti_device, aoti):
            assert aoti.device == aoti_device
            assert aoti_device.type in ("cpu", "cuda")
        """
    )
    result = pytester.runpytest("--aoti-device=cpu,cuda:1", "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["*::test_device[[]cpu[]] PASSED*", "*::test_device[[]cuda:1[]] PASSED*"]
    )


def test_a_blocked_feature_plugin_takes_its_options_and_keywords_with_it(
    pytester: pytest.Pytester,
) -> None:
    """``-p no:aoti-values`` as pytest's own ``-p no:NAME``: the plugin's flags are gone from
    ``--help`` and its keywords are a usage error that names it; the others stay."""
    pytester.makepyfile(
        test_blocked="""
import pytest
import torch
from pytest_aoti import AotiUsageError

def test_keyword(aoti):
    with pytest.raises(AotiUsageError, match="values_draws is an option of the aoti-values "
                       "plugin, which this run blocks: drop the option, or -p no:aoti-values"):
        aoti.check(torch.nn.Identity(), (torch.ones(2),), values_draws=3)
"""
    )
    result = pytester.runpytest("-p", "no:aoti-values", "-p", "no:xdist", "--aoti-device=cpu")
    result.assert_outcomes(passed=1)
    shown = pytester.runpytest("-p", "no:aoti-values", "--help").stdout.str()
    assert "--aoti-values-draws" not in shown and "--aoti-probes" in shown
    assert "--aoti-values-draws" in pytester.runpytest("--help").stdout.str()


def test_ini_twin_sets_the_device(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\naoti_device = cpu\naoti_examples = 3\n")
    pytester.makepyfile(
        """
        def test_device(aoti):
            assert str(aoti.device) == "cpu"
            assert aoti.defaults.options.as_dict()["examples"] == 3
        """
    )
    result = pytester.runpytest("-v")
    result.stdout.fnmatch_lines(["*::test_device[[]cpu[]] PASSED*"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(aoti): pass")
    result = pytester.runpytest("--aoti-device=cuda")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--aoti-device=cuda: torch.cuda.is_available() is False on this machine*"]
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--aoti-device=tpu"], "*unknown device 'tpu'*"),
        (["--aoti-device=cpu,cpu"], "*device listed twice*"),
        (["--aoti-cache=sometimes"], "*expected one of off, read, readwrite*"),
        (["--aoti-examples=-1"], "*expected 0 or more*"),
        (["--aoti-rtol=tight"], "*expected a number such as 1e-5*"),
        (["--aoti-cache-max-size=huge"], "*expected a size such as 4GiB*"),
    ],
)
def test_bad_option_values_are_usage_errors(
    pytester: pytest.Pytester, args: list[str], message: str
) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_bad_ini_value_names_the_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\naoti_max_dim = 0\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini option aoti_max_dim = '0': expected 1 or more*"])


def test_marker_defaults_reach_the_tester(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        pytestmark = pytest.mark.aoti(atol=1e-3, examples=5)

        @pytest.mark.aoti(rtol=1e-2, inductor_configs={"max_autotune": False})
        def test_defaults(aoti):
            assert (aoti.defaults.rtol, aoti.defaults.atol) == (1e-2, 1e-3)
            assert aoti.defaults.options.as_dict()["examples"] == 5
            assert aoti.defaults.inductor_configs == {"max_autotune": False}

        def test_command_line_default(aoti):
            # below the marker and the tolerance hook: see tests/core/test_downstream.py
            assert (aoti.defaults.rtol, aoti.defaults.base_rtol) == (None, 0.5)
        """
    )
    result = pytester.runpytest("--aoti-device=cpu", "--aoti-rtol=0.5")
    result.assert_outcomes(passed=2)


def test_unknown_marker_option_is_a_one_line_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.aoti(rtoll=1e-3)
        def test_typo(aoti):
            pass
        """
    )
    result = pytester.runpytest("--aoti-device=cpu")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["E * @pytest.mark.aoti got unknown option(s) rtoll; allowed: rtol, atol, strict, *"]
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            "aoti.check(Double(), torch.ones(2))",
            "args must be a tuple of positional inputs, got Tensor; write (x,) for a single input",
        ),
        (
            "aoti.check(lambda x: x, (torch.ones(2),))",
            "module must be a torch.nn.Module, got function*",
        ),
        ("aoti.check(Double(), (torch.ones(2),), calls=0)", "calls must be a positive int, got 0"),
        (
            "aoti.check(Double(), (torch.ones(2),), samples=[(torch.ones(3),)])",
            "samples need dynamic_shapes*",
        ),
        (
            "aoti.check(Double(), (torch.ones(2),), samples=(torch.ones(3),), dynamic_shapes='auto')",
            "samples must be a list of argument tuples*",
        ),
        (
            "aoti.check(Double(), (torch.ones(2),), dynamic_shapes='guess')",
            "*dynamic_shapes must be a torch.export spec or \"auto\", got 'guess'",
        ),
        ("aoti.check(Double(), (torch.ones(2),), kwargs=[1])", "kwargs must be a dict, got list"),
    ],
)
def test_fixture_misuse_is_a_one_line_error(
    pytester: pytest.Pytester, call: str, message: str
) -> None:
    pytester.makepyfile(
        f"""
        import torch

        class Double(torch.nn.Module):
            def forward(self, x):
                return x * 2

        def test_misuse(aoti):
            {call}
        """
    )
    result = pytester.runpytest("--aoti-device=cpu", "--aoti-cache=off")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"E * {message}"])
    assert "pytest_aoti/" not in result.stdout.str()


def test_export_failure_is_short_and_says_what_to_try(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import torch

        class DataDependent(torch.nn.Module):
            def forward(self, x):
                if x.sum() > 0:
                    return x + 1
                return x - 1

        def test_export(aoti):
            aoti.check(DataDependent(), (torch.ones(3),))
        """
    )
    result = pytester.runpytest("--aoti-device=cpu", "--aoti-cache=off")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            # torch's own error, chained, shown at the model's line
            ">       if x.sum() > 0:",
            "E       *GuardOnDataDependentSymNode: Could not guard on data-dependent expression*",
            "The above exception was the direct cause of the following exception:",
            ">       aoti.check(DataDependent(), (torch.ones(3),))",
            "E       pytest_aoti.errors.AotiExportError: torch.export.export failed: "
            "Could not guard on data-dependent expression *",
            "E         at *test_export_failure_is_short_and_says_what_to_try.py:5 in forward",
            "E             if x.sum() > 0:",
            "E         What to try: *torch.cond*where the value only decides a size or an "
            "assert, state the fact with torch._check*draft_export*",
        ]
    )
    failure = result.stdout.str().split("= FAILURES =")[1].split("- Captured")[0]
    assert len(failure.splitlines()) < 60, failure
    assert "site-packages/torch" not in failure  # none of torch's internal frames


@pytest.mark.compiles
def test_compile_failure_names_the_compiler_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        import torch

        class Double(torch.nn.Module):
            def forward(self, x):
                return x * 2

        @pytest.mark.aoti(inductor_configs={"cpp.cxx": (None, "no-such-compiler++")})
        def test_compile(aoti):
            aoti.check(Double(), (torch.ones(3),))
        """
    )
    result = pytester.runpytest("--aoti-device=cpu", "--aoti-cache=off")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["E *.AotiCompileError: AOTI compile failed: InvalidCxxCompiler: No working C++ compiler*"]
    )


@pytest.mark.compiles
def test_hooks_extend_configs_and_see_programs_and_results(
    run_aoti, pytester: pytest.Pytester
) -> None:
    pytester.makeconftest(
        """
        SEEN = []

        def pytest_aoti_inductor_configs(config, device):
            return {"aot_inductor.debug_compile": False} if device.type == "cpu" else None

        def pytest_aoti_program_ready(config, program):
            SEEN.append(("ready", program.key))

        def pytest_aoti_check_done(item, result):
            SEEN.append(("done", item.name, result.program.key))
            if item.name.startswith("test_budget"):
                raise AssertionError(f"max abs error {result.max_abs} over budget")

        def pytest_sessionfinish(session):
            print("SEEN", [entry[0] for entry in SEEN])
        """
    )
    result = run_aoti(
        """
        def test_configs_reach_the_compile(aoti):
            assert aoti.defaults.inductor_configs == {"aot_inductor.debug_compile": False}
            result = aoti.check(DoubleThenCos(), (example(),))
            assert result.max_abs < 1e-5

        def test_budget(aoti):
            aoti.check(DoubleThenCos(), (example(),))
        """,
        "-s",
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["E * max abs error * over budget"])
    # one program for both tests: ready once, then each passed check
    result.stdout.fnmatch_lines(["*SEEN [[]'ready', 'done', 'done'[]]"])


@pytest.mark.compiles
def test_properties_reach_junit_xml(run_aoti, pytester: pytest.Pytester) -> None:
    result = run_aoti(
        """
        def test_props(aoti):
            aoti.check(DoubleThenCos(), (example(),))
        """,
        "--junitxml=report.xml",
    )
    result.assert_outcomes(passed=1)
    xml = (pytester.path / "report.xml").read_text()
    for name in (
        "aoti_device",
        "aoti_program",
        "aoti_cache_hit",
        "aoti_compile_seconds",
        "aoti_max_abs_error",
    ):
        assert f'name="{name}"' in xml, name


@pytest.mark.compiles
def test_buffer_mutation_is_a_note_once_per_program(run_aoti) -> None:
    result = run_aoti(
        """
        def test_counter(aoti):
            aoti.check(Counter(), (example(),), calls=1)

        def test_counter_again(aoti):
            # the same program: noted once a session, not once a check
            aoti.check(Counter(), (example(),), calls=1)
            aoti.compile(Counter(), (example(),))

        def test_declared(aoti):
            # mutated_buffers= declares the state: the user knows, no note
            aoti.check(RunningMean(), (torch.randn(4, 2),), mutated_buffers={"mean", "count"})
        """,
        "-W",
        "error",
        "-p",
        "no:randomly",
    )
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "*aoti: notes (not failures)*",
            "the program mutates registered buffers {'counter'}*",
        ]
    )
    assert result.stdout.str().count("the program mutates registered buffers") == 1


def test_default_cache_is_private_under_a_group_writable_umask(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import stat

        def test_store(request):
            store = request.config.pluginmanager.get_plugin("aoti-session").stores.store
            assert store is not None and store.writable
            mode = (request.config.rootpath / ".pytest_cache" / "d" / "aoti").stat().st_mode
            assert stat.S_IMODE(mode) == 0o700
        """
    )
    previous = os.umask(0o002)
    try:
        result = pytester.runpytest("-W", "error::pytest_aoti.AotiCacheWarning")
    finally:
        os.umask(previous)
    result.assert_outcomes(passed=1)


def test_a_run_without_aoti_tests_makes_no_cache_folder(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--aoti-device=cpu")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["aoti: device=cpu, cache=readwrite at .pytest_cache/d/aoti"])
    assert (pytester.path / ".pytest_cache").is_dir()  # pytest's own cache is written
    assert not (pytester.path / ".pytest_cache" / "d" / "aoti").exists()


def test_header_says_when_there_is_no_cache(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("-p", "no:cacheprovider", "--aoti-device=cpu")
    result.stdout.fnmatch_lines(
        ["aoti: device=cpu, cache=off (pytest's cache provider is disabled*"]
    )
