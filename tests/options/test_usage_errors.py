"""A mistake in a call, a factory or an option is a short usage error, before any compile.

Every test here runs real pytest sessions with ``pytester`` and compiles nothing: a bad
value must fail before the first export, so a test that compiled would also be slow. No
test asserts a time; the compile count of the JSON report is asserted where a check ran.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_aoti.options.catalog import Catalog
from pytest_aoti.options.option import Option
from pytest_aoti.plugins import default_features

# the whole option table, also where the run blocks the feature plugins

NEEDS_CUDA = pytest.mark.skipif(
    not __import__("torch").cuda.is_available(), reason="needs a CUDA device"
)
# a line of the plugin's own code in a traceback means the user saw our internals
PLUGIN_FRAME = "pytest_aoti/"


def assert_clean_error(result: pytest.RunResult) -> None:
    """A usage error at startup: exit 4, one ``ERROR:`` line, no traceback of ours."""
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, output
    assert "INTERNALERROR" not in output and "Traceback" not in output, output
    assert any(line.startswith("ERROR: ") for line in result.stderr.lines), output


def failure_text(result: pytest.RunResult) -> str:
    return result.stdout.str()


def assert_no_plugin_frame(result: pytest.RunResult) -> None:
    text = failure_text(result)
    assert PLUGIN_FRAME not in text.replace("pytest_aoti/errors", "errors"), text


def compiles(path: Path) -> int:
    report = json.loads(path.read_text())
    return len(report["compiles"])


# --------------------------------------------------------------------------- calls


CALL = """
import torch
import pytest


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("counter", torch.zeros(1))

    def forward(self, x):
        self.counter.add_(1)
        return x * 2


def test_call(aoti):
    {body}
"""


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "aoti.check(Counter(), (torch.ones(2),), mutates=[1, 2])",
            "*AotiUsageError: mutates must be a dict of input name to expected value, "
            "e.g. mutates={*got list",
        ),
        (
            "aoti.check(Counter(), (torch.ones(2),), mutates={0: torch.ones(2)})",
            "*AotiUsageError: mutates must be keyed by input names (str), got 0*",
        ),
        (
            'aoti.check(Counter(), (torch.ones(2),), mutated_buffers="counter")',
            "*AotiUsageError: mutated_buffers must be a set, list or tuple of buffer names, "
            "got the string 'counter'; write mutated_buffers={*counter*}",
        ),
        (
            'aoti.check(Counter(), (torch.ones(2),), mutated_buffers={"counter": 1})',
            "*AotiUsageError: mutated_buffers must be a set, list or tuple of buffer names*",
        ),
        (
            'aoti.check(Counter(), (torch.ones(2, device="meta"),))',
            "*AotiUsageError: input args[[]0[]] is on the meta device (a shape, no data); *",
        ),
        (
            'aoti.check(Counter(), (torch.ones(2),), {"y": torch.ones(1, device="meta")})',
            "*AotiUsageError: input kwargs[[]'y'[]] is on the meta device*",
        ),
        (
            'aoti.check(Counter().to("meta"), (torch.ones(2),))',
            "*AotiUsageError: the module's 'counter' is on the meta device*to_empty*",
        ),
    ],
    ids=[
        "mutates-list",
        "mutates-int-key",
        "buffers-string",
        "buffers-dict",
        "meta-input",
        "meta-kwarg",
        "meta-module",
    ],
)
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=NEEDS_CUDA)])
def test_a_wrong_call_fails_at_the_users_line_before_any_compile(
    pytester: pytest.Pytester, body: str, message: str, device: str
) -> None:
    """On CUDA too: a meta tensor must be refused before it is moved to the device."""
    pytester.makepyfile(test_call=CALL.format(body=body))
    result = pytester.runpytest(f"--aoti-device={device}", "--aoti-report=r.json", "-p", "no:xdist")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f">*{body.split('(')[0]}*", message])
    assert "NotImplementedError" not in result.stdout.str()
    assert_no_plugin_frame(result)
    assert compiles(pytester.path / "r.json") == 0


def test_a_factory_that_needs_an_argument_is_a_clear_test_error(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        zoo="import torch\n\n\ndef make(size, device, scale=2):\n"
        "    return torch.nn.Linear(size, size), (torch.ones(1, size),)\n"
    )
    result = pytester.runpytest(
        "--aoti-device=cpu", "--aoti-model=zoo.py:make", "--aoti-report=r.json", "-p", "no:xdist"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E   pytest_aoti.errors.AotiUsageError: zoo.py:make needs the argument(s) 'size'; "
            "a factory is called with no arguments (or only device=)*"
        ]
    )
    assert "TypeError: make() missing" not in result.stdout.str()
    assert "pytest_aoti/models" not in result.stdout.str()
    assert compiles(pytester.path / "r.json") == 0


# --------------------------------------------------------------------------- options

BAD_VALUES = {
    "aoti-device": "tpu",
    "aoti-export": "loose",
    "aoti-rtol": "-1",
    "aoti-atol": "abc",
    "aoti-inductor-configs": "{not json",
    "aoti-examples": "-3",
    "aoti-values": "edges",
    "aoti-values-draws": "-2",
    "aoti-max-dim": "0",
    "aoti-localize": "maybe",
    "aoti-random": "sometimes",
    "aoti-precision": "loose",
    "aoti-probes": "loud",
    "aoti-weights": "always",
    "aoti-cpp-loader": "maybe",
    "aoti-keep-failed": "afile/kept",
    "aoti-report": "afile/r.json",
    "aoti-profile": "afile/traces",
    "aoti-durations": "x",
    "aoti-cache": "sometimes",
    "aoti-cache-max-size": "lots",
    "aoti-model": "nocolon",
    "aoti-cache-url": "bucket/prefix",
    "aoti-cache-remote": "write",
    "aoti-cache-storage-options": "[1, 2]",
    "aoti-cache-not-before": "yesterday",
    "aoti-serving-checks": "maybe",
    "aoti-hazards": "loud",
    "aoti-crash-screen": "maybe",
    "aoti-budget": "lots",
    "aoti-layouts": "nhwc",
    "aoti-golden-package-limit": "lots",
}
"""A bad value of every option read at startup (its row has a parser); ``aoti-cache-dir``
copes with an unusable place by design, ``aoti-cache-trusted-keys`` is checked where the
remote store opens (tests/fleet/test_remote_units.py), ``aoti-golden`` is a folder a check
reads or an update writes (a missing record is that check's failure, tests/golden)."""
_NOT_HERE = {
    "aoti-cache-dir",
    "aoti-cache-trusted-keys",
    "aoti-cache-clear",
    "aoti-models-list",
    "aoti-golden",
    "aoti-golden-update",
}

# every default plugin's options, whichever plugins this run blocks
STARTUP = [option for option in Catalog(default_features()).rows() if option.parse is not None]


def _name(option: object) -> str:
    return str(getattr(option, "name", option))


def test_the_table_covers_every_option_read_at_startup() -> None:
    assert {option.name for option in STARTUP} - _NOT_HERE == set(BAD_VALUES)


@pytest.mark.parametrize(
    "option", [o for o in STARTUP if o.name in BAD_VALUES and o.cli], ids=_name
)
def test_a_bad_command_line_value_is_a_usage_error(
    pytester: pytest.Pytester, option: object
) -> None:

    assert isinstance(option, Option)
    pytester.makefile("", afile="")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest(f"--{option.name}={BAD_VALUES[option.name]}", "-p", "no:xdist")
    assert_clean_error(result)
    assert f"--{option.name}" in result.stderr.str()


@pytest.mark.parametrize(
    "option", [o for o in STARTUP if o.name in BAD_VALUES and o.ini_key], ids=_name
)
def test_a_bad_ini_value_is_a_usage_error(pytester: pytest.Pytester, option: object) -> None:

    assert isinstance(option, Option) and option.ini_key is not None
    pytester.makefile("", afile="")
    pytester.makeini(f"[pytest]\n{option.ini_key} = {BAD_VALUES[option.name]}\n")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("-p", "no:xdist")
    assert_clean_error(result)
    assert option.ini_key in result.stderr.str() or f"--{option.name}" in result.stderr.str()


BAD_KEYWORDS = {
    "rtol": "'tight'",
    "atol": "-1.0",
    "strict": "'yes'",
    "inductor_configs": "{'no_such_inductor_key': 1}",
    "examples": "-1",
    "values": "'edges'",
    "values_draws": "-1",
    "values_skip": "'x'",
    "max_dim": "0",
    "localize": "'maybe'",
    "random": "'sometimes'",
    "precision": "'loose'",
    "probes": "'loud'",
    "weights": "'always'",
    "cpp_loader": "'yes'",
    "probes_skip": "{'x': {'no_such_variant'}}",
    "threads": "0",
    "max_extra_bytes": "-5",
    "training": "'yes'",
    "crash_screen": "'yes'",
    "budget": "-1",
    "layouts": "('nhwc',)",
}
"""A bad value of every marker and ``aoti.check`` keyword."""


def test_the_keyword_table_covers_every_marker_and_call_keyword() -> None:
    keywords = {o.keyword_name for o in Catalog(default_features()).rows() if o.marker or o.keyword}
    assert keywords == set(BAD_KEYWORDS)


@pytest.mark.parametrize("where", ["marker", "call"])
def test_a_bad_marker_or_call_keyword_fails_its_test_before_any_compile(
    pytester: pytest.Pytester, where: str
) -> None:
    options = {o.keyword_name: o for o in Catalog(default_features()).rows()}
    names = [
        name
        for name in BAD_KEYWORDS
        if (options[name].marker if where == "marker" else options[name].keyword)
    ]
    tests = []
    for name in names:
        if where == "marker":
            tests.append(
                f"@pytest.mark.aoti({name}={BAD_KEYWORDS[name]})\n"
                f"def test_{name}(aoti):\n"
                "    aoti.check(torch.nn.Linear(2, 2), (torch.ones(1, 2),))\n"
            )
        else:
            tests.append(
                f"def test_{name}(aoti):\n"
                "    aoti.check(torch.nn.Linear(2, 2), (torch.ones(1, 2),), "
                f"{name}={BAD_KEYWORDS[name]})\n"
            )
    pytester.makepyfile(test_keywords="import pytest\nimport torch\n\n\n" + "\n\n".join(tests))
    result = pytester.runpytest("--aoti-device=cpu", "--aoti-report=r.json", "-p", "no:xdist")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) + outcomes.get("errors", 0) == len(names), outcomes
    output = result.stdout.str()
    assert "INTERNALERROR" not in output
    for name in names:
        result.stdout.fnmatch_lines([f"E   *AotiUsageError: *{name}*"])
    assert_no_plugin_frame(result)
    assert compiles(pytester.path / "r.json") == 0


BUDGET_WORDS = "'off', a share such as 0.25 or a percentage such as '25%'"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("lots", "expected off, a share such as 0.25 or a percentage such as 25%, got 'lots'"),
        ("-1", "expected a share of 0 or more, got '-1'"),
        ("-5%", "expected a share of 0 or more, got '-5%'"),
    ],
)
def test_a_bad_budget_on_the_command_line_says_what_it_takes(
    pytester: pytest.Pytester, value: str, message: str
) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest(f"--aoti-budget={value}", "-p", "no:xdist")
    assert_clean_error(result)
    result.stderr.fnmatch_lines([f"*argument --aoti-budget: {message}"])


def test_a_bad_budget_keyword_says_what_it_takes(pytester: pytest.Pytester) -> None:
    """The marker's and ``aoti.check``'s ``budget=``: a share, a percentage or off."""
    pytester.makepyfile(
        test_budget_keywords="""
        import pytest
        import torch

        @pytest.mark.aoti(budget=-1)
        def test_marker(aoti):
            aoti.check(torch.nn.Linear(2, 2), (torch.ones(1, 2),))

        def test_word(aoti):
            aoti.check(torch.nn.Linear(2, 2), (torch.ones(1, 2),), budget="lots")

        def test_bool(aoti):
            aoti.check(torch.nn.Linear(2, 2), (torch.ones(1, 2),), budget=True)
        """
    )
    result = pytester.runpytest("--aoti-device=cpu", "--aoti-report=r.json", "-p", "no:xdist")
    result.assert_outcomes(failed=2, errors=1)  # the marker is read as the fixture is set up
    for line in (
        f"E   *AotiUsageError: @pytest.mark.aoti: budget must be {BUDGET_WORDS}, got -1",
        f"E   *AotiUsageError: budget must be {BUDGET_WORDS}, got 'lots'",
        f"E   *AotiUsageError: budget must be {BUDGET_WORDS}, got True",
    ):
        result.stdout.fnmatch_lines([line])
    assert_no_plugin_frame(result)
    assert compiles(pytester.path / "r.json") == 0


# --------------------------------------------------------------------------- unknown keywords

TYPOS = """
import pytest
import torch


def test_check(aoti):
    aoti.check(torch.nn.ReLU(), (torch.ones(2),), mutate={})


@pytest.mark.aoti(crash_screan=False)
def test_marker(aoti):
    aoti.check(torch.nn.ReLU(), (torch.ones(2),))


def test_compile(aoti):
    aoti.compile(torch.nn.ReLU(), (torch.ones(2),), dynamic_shape={})
"""


def test_an_unknown_keyword_gets_a_did_you_mean_and_the_full_list_before_any_compile(
    pytester: pytest.Pytester,
) -> None:
    """In ``aoti.check``, ``aoti.compile`` and the marker, a short usage error at the test:
    the closest keywords that place takes, then all of them, the call's own among them."""
    pytester.makepyfile(test_typos=TYPOS)
    result = pytester.runpytest("--aoti-device=cpu", "--aoti-report=r.json", "-p", "no:xdist")
    result.assert_outcomes(failed=2, errors=1)  # the marker is read as the fixture is set up
    call = (
        "kwargs, mutates, mutated_buffers, calls, samples, dynamic_shapes, steps, next_inputs, "
        "rtol, atol, *"
    )
    for line in (
        f"E   *AotiUsageError: aoti.check() got unknown option(s) mutate; allowed: {call}"
        ". Did you mean mutates?",
        "E   *AotiUsageError: @pytest.mark.aoti got unknown option(s) crash_screan; "
        "allowed: rtol, atol, *, crash_screen, *. Did you mean crash_screen?",
        "E   *AotiUsageError: aoti.compile() got unknown option(s) dynamic_shape; "
        "allowed: kwargs, dynamic_shapes, strict, inductor_configs. "
        "Did you mean dynamic_shapes?",
    ):
        result.stdout.fnmatch_lines([line])
    assert "unexpected keyword argument" not in result.stdout.str()
    assert_no_plugin_frame(result)
    assert compiles(pytester.path / "r.json") == 0


def test_an_unknown_ini_key_is_pytests_own_warning_and_strict_config_error(
    pytester: pytest.Pytester,
) -> None:
    """pytest itself reports an ini key no plugin registered: a warning, and a usage error
    under ``--strict-config``; the plugin adds nothing of its own."""
    pytester.makeini("[pytest]\naoti_devic = cpu\n")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    warned = pytester.runpytest("-p", "no:xdist")
    warned.assert_outcomes(passed=1, warnings=1)
    warned.stdout.fnmatch_lines(["*PytestConfigWarning: Unknown config option: aoti_devic"])
    refused = pytester.runpytest("--strict-config", "-p", "no:xdist")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["ERROR: Unknown config option: aoti_devic"])


# --------------------------------------------------------------------------- smaller traps


@pytest.mark.parametrize("mode", ["read", "off"])
def test_clearing_a_cache_the_run_does_not_write_is_a_usage_error(
    pytester: pytest.Pytester, mode: str
) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("--aoti-cache-clear", f"--aoti-cache={mode}", "-p", "no:xdist")
    assert_clean_error(result)
    result.stderr.fnmatch_lines(
        [f"ERROR: --aoti-cache-clear empties the cache, which --aoti-cache={mode} never writes*"]
    )


def test_a_missing_gpu_quotes_the_device_list_as_written(pytester: pytest.Pytester) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    pytester.makepyfile(test_x="def test_x(aoti_device):\n    pass\n")
    result = pytester.runpytest("--aoti-device=cpu,cuda", "-p", "no:xdist")
    assert_clean_error(result)
    result.stderr.fnmatch_lines(
        ["ERROR: --aoti-device=cpu,cuda (cuda): torch.cuda.is_available() is False*"]
    )


def test_an_hf_field_typo_gets_a_did_you_mean(pytester: pytest.Pytester) -> None:
    pytest.importorskip("transformers")
    result = pytester.runpytest("--aoti-model=hf:bert?hiden_size=32", "-p", "no:xdist")
    assert_clean_error(result)
    result.stderr.fnmatch_lines(
        [
            "ERROR: --aoti-model=hf:bert?hiden_size=32: *no field 'hiden_size' (did you mean hidden_size*"
        ]
    )


def test_the_model_list_of_factories_imports_no_transformers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        zoo="import torch\n\n\ndef make():\n    return torch.nn.ReLU(), (torch.ones(2),)\n"
    )
    pytester.makeconftest(
        "import sys\n\n\ndef pytest_unconfigure(config):\n"
        "    print('transformers imported:', 'transformers' in sys.modules)\n"
    )
    result = pytester.runpytest_subprocess(
        "--aoti-models-list", "--aoti-model=zoo.py:make", "-p", "no:xdist", timeout=120
    )
    result.stdout.fnmatch_lines(["zoo.py:make: ReLU(input=(2,) float32)"])
    result.stdout.fnmatch_lines(["transformers imported: False"])


def test_a_data_dependent_branch_is_cut_to_the_reason_line_and_hint(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_branch="""
        import torch

        class SignSwitch(torch.nn.Module):
            def forward(self, x):
                if x.sum() > 0:
                    return x + 1
                return x - 1

        def test_branch(aoti):
            aoti.check(SignSwitch(), (torch.randn(3),))
        """
    )
    result = pytester.runpytest("--aoti-device=cpu", "--aoti-cache=off", "-p", "no:xdist")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E       pytest_aoti.errors.AotiExportError: torch.export.export failed: "
            "Could not guard on data-dependent expression*",
            "E         at *test_branch.py:5 in forward",
            "E             if x.sum() > 0:",
            "E         What to try: *torch.cond*",
        ]
    )
    text = result.stdout.str()
    assert "def forward(self, arg0_1" not in text  # torch's partial graph, printed twice
    assert "Unable to find user code" not in text
    assert "E         Caused by: (_export" not in text
    failure = text.split("= FAILURES =")[1].split("- aoti: slowest")[0]
    assert len(failure.splitlines()) <= 28, failure  # 66 with torch's graph printed twice


def test_a_wrong_dynamic_shapes_key_names_the_inputs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_spec="""
        import torch
        from torch.export import Dim

        class Scale(torch.nn.Module):
            def forward(self, tokens):
                return tokens * 2

        def test_spec(aoti):
            aoti.check(Scale(), (torch.ones(3, 2),), dynamic_shapes={"token": {0: Dim("b")}})
        """
    )
    result = pytester.runpytest("--aoti-device=cpu", "--aoti-report=r.json", "-p", "no:xdist")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E   *AotiUsageError: dynamic_shapes has key(s) 'token' (did you mean 'tokens'?), "
            "but the inputs of Scale.forward are 'tokens': key the spec by those names*"
        ]
    )
    assert "strict=True" not in result.stdout.str()
    assert compiles(pytester.path / "r.json") == 0


def test_a_marker_typo_fails_also_without_the_aoti_fixture(
    run_aoti: Callable[..., pytest.RunResult],
) -> None:
    result = run_aoti(
        """
        @pytest.mark.aoti(rtoll=1e-3)
        def test_device_only(aoti_device):
            assert aoti_device.type == "cpu"
        """
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*@pytest.mark.aoti got unknown option(s) rtoll*Did you mean rtol?"]
    )
