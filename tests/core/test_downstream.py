"""What other teams' repos adjust without forking: hooks for tolerances, export options and
inductor configs, ini configs, export variants, and one GPU per xdist worker."""

from __future__ import annotations

import types

import pytest
import torch

from pytest_aoti.tester import CheckDefaults


def test_tolerance_precedence_call_marker_hook_options_dtype() -> None:
    def hook(path: str, dtype: torch.dtype) -> tuple[float, float] | None:
        return (0.3, 0.03) if path.startswith("output") else None

    base = CheckDefaults(base_rtol=0.4, base_atol=0.04, tolerance_hook=hook)
    # dtype defaults only where nothing else speaks
    assert CheckDefaults().tolerance().resolve(torch.float32) == pytest.approx((1.3e-6, 1e-5))
    assert not CheckDefaults().tolerance().is_final(torch.float32)
    # the command line is below the hook; the hook speaks for outputs only here
    options_only = base.tolerance()
    assert options_only.resolve(torch.float32, "input 'x'") == (0.4, 0.04)
    assert options_only.describe(torch.float32, "input 'x'").endswith("(--aoti-rtol/--aoti-atol)")
    assert options_only.resolve(torch.float32, "output[0]") == (0.3, 0.03)
    assert options_only.describe(torch.float32, "output[0]").endswith(
        "(pytest_aoti_tolerance hook)"
    )
    # the marker is above the hook, the call above the marker; each value on its own
    marked = base.overridden(rtol=0.2)
    assert marked.tolerance().resolve(torch.float32, "output[0]") == (0.2, 0.03)
    called = marked.overridden(rtol=0.1)  # a call's rtol over the marker's
    assert called.tolerance().resolve(torch.float32, "output[0]") == (0.1, 0.03)
    both = marked.overridden(rtol=0.1, atol=0.01)
    assert both.tolerance().resolve(torch.float32, "output[0]") == (0.1, 0.01)
    assert both.tolerance().is_final(torch.float32, "output[0]")


def test_export_options_precedence() -> None:
    defaults = CheckDefaults(
        export_options={"strict": True, "prefer_deferred_runtime_asserts_over_guards": True}
    )
    assert defaults.export_kwargs() == {
        "strict": True,
        "prefer_deferred_runtime_asserts_over_guards": True,
    }
    assert defaults.overridden(strict=False).export_kwargs()["strict"] is False
    assert defaults.overridden(strict=False).overridden(strict=True).export_kwargs()["strict"]


HOOKS_CONFTEST = """
import torch

def pytest_aoti_tolerance(item, path, dtype, device):
    if "loose" in item.name:
        return (0.1, 0.6)
    return None

def pytest_aoti_export_options(item):
    return {"strict": True} if "strict_by_hook" in item.name else None

def pytest_aoti_inductor_configs(config, device, item):
    return {"aot_inductor.debug_compile": False} if "per_item" in item.name else None
"""


@pytest.mark.compiles
def test_hooks_change_verdicts_and_options(run_aoti, pytester: pytest.Pytester) -> None:
    pytester.makeconftest(HOOKS_CONFTEST)
    pytester.makeini(
        """
        [pytest]
        aoti_inductor_configs = {"aot_inductor.debug_compile": true, "max_autotune": false}
        """
    )
    result = run_aoti(
        """
        def test_tight(aoti):
            aoti.check(OffWhenCompiled(), (example(),))

        def test_loose(aoti):
            # the conftest's tolerance hook passes what the default tolerance fails
            aoti.check(OffWhenCompiled(), (example(),))

        def test_loose_but_the_call_decides(aoti):
            aoti.check(OffWhenCompiled(), (example(),), rtol=0, atol=1e-3)

        def test_strict_by_hook(aoti):
            # strict export drops the reassignment; the signature check catches it
            with pytest.raises(AotiCheckError, match="buffer 'level' changed in eager but not recorded"):
                aoti.check(Level(), (example(),))

        @pytest.mark.aoti(strict=False)
        def test_strict_by_hook_marker_wins(aoti):
            assert aoti.defaults.export_kwargs()["strict"] is False

        def test_configs_per_item(aoti):
            # the hook (per test) overrides the ini file's configs, which are merged below
            assert aoti.defaults.inductor_configs == {
                "aot_inductor.debug_compile": False,
                "max_autotune": False,
            }

        def test_ini_configs(aoti):
            assert aoti.defaults.inductor_configs == {
                "aot_inductor.debug_compile": True,
                "max_autotune": False,
            }
        """,
        "-W",
        "ignore:While compiling, we found certain side effects:UserWarning",
        "--aoti-localize=off",
    )
    result.assert_outcomes(passed=5, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_tight*",
            "E * 1 of 6 elements beyond rtol=1.3e-06, atol=1e-05",
            "*test_loose_but_the_call_decides*",
            "E * 1 of 6 elements beyond rtol=0, atol=0.001",
            "E *tolerance rtol=0, atol=0.001 (set by the test)",
        ]
    )


def test_unknown_ini_inductor_config_names_the_closest(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        """
        [pytest]
        aoti_inductor_configs = {"max_autotunes": true}
        """
    )
    pytester.makepyfile("def test_x(aoti): pass")
    result = pytester.runpytest("--aoti-device=cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*aoti_inductor_configs: unknown inductor option 'max_autotunes' (did you mean max_autotune*"
        ]
    )


def test_ini_inductor_configs_must_be_a_json_object(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        """
        [pytest]
        aoti_inductor_configs = max_autotune=true
        """
    )
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini option aoti_inductor_configs = *expected a JSON object*"])


@pytest.mark.compiles
def test_export_variants_run_each_test_in_each_mode(run_aoti) -> None:
    result = run_aoti(
        """
        def test_doubling(aoti, aoti_export_mode):
            if aoti_export_mode == "strict":
                # strict export of self.level = self.level * 2 records no buffer mutation:
                # the plain check's signature test names the buffer
                with pytest.raises(AotiCheckError, match="buffer 'level' changed in eager"):
                    aoti.check(Doubling(), (torch.ones(3, 2),))
            else:
                aoti.check(Doubling(), (torch.ones(3, 2),), mutated_buffers={"level"})
        """,
        "--aoti-export=strict,non-strict",
        "-v",
        "-W",
        "ignore::pytest_aoti.AotiBufferMutationWarning",
        "-W",
        "ignore:While compiling, we found certain side effects:UserWarning",
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_doubling[[]cpu-strict[]] PASSED*",
            "*test_doubling[[]cpu-non-strict[]] PASSED*",
        ]
    )


def test_bad_export_mode_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--aoti-export=lenient")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*expected strict, non-strict, default or a comma list*"])


@pytest.mark.parametrize(
    ("worker", "gpus", "expected"),
    [
        ("gw0", 4, "cuda:0"),
        ("gw1", 4, "cuda:1"),
        ("gw5", 4, "cuda:1"),
        ("gw3", 1, "cuda"),
        ("", 4, "cuda"),
    ],
)
def test_each_xdist_worker_takes_its_own_gpu(
    monkeypatch: pytest.MonkeyPatch, worker: str, gpus: int, expected: str
) -> None:
    from pytest_aoti.options.settings import AotiSettings
    from pytest_aoti.session import AotiSession

    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    config = types.SimpleNamespace(workerinput={"workerid": worker} if worker else {})
    from pytest_aoti.plugins import default_catalog

    session = AotiSession(config, AotiSettings(), default_catalog())  # type: ignore[arg-type]
    assert session.torch_device("cuda") == torch.device(expected)
    # a device the user pinned stays pinned
    assert session.torch_device("cuda:2") == torch.device("cuda:2")
    assert session.torch_device("cpu") == torch.device("cpu")


@pytest.mark.compiles
def test_thread_safety_check(run_aoti) -> None:
    result = run_aoti(
        """
        def test_input_mutation_is_thread_safe(aoti):
            x = example()
            aoti.check(DoubleThenCos(), (x,), mutates={"x": x * 4}, calls=2, threads=4)

        def test_buffer_state_is_not(aoti):
            aoti.check(Counter(), (example(),), mutated_buffers={"counter"}, calls=1, threads=3)
        """
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "E * buffer 'counter' makes the program not thread-safe: one engine serving 3 "
            "threads shares this state between them",
            "E *pass the state as an input the program mutates*",
        ]
    )
