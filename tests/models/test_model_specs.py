"""``pytest --aoti-model=SPEC``: tests with no test file, from factories and HF architectures.

The factory models come from ``examples/aoti_models.py`` (one small MLP compiles, once for
the whole suite through the shared cache dir); the Hugging Face test compiles four tiny
architectures and needs ``transformers`` (skipped without it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from pytest_aoti.errors import AotiUsageError, install_hint
from pytest_aoti.models.collect import resolve_specs
from pytest_aoti.models.factories import call_factory, describe_inputs, read_case
from pytest_aoti.models.model_spec import clean_id
from pytest_aoti.plugins import default_catalog

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "aoti_models.py"

KEYWORDS = default_catalog().check_keywords()
"""The ``aoti.check`` keywords of a run of every default plugin."""


@pytest.fixture
def factories(pytester: pytest.Pytester) -> pytest.Pytester:
    """A directory holding only the example factory module, as ``mymodels.py``."""
    pytester.makepyfile(mymodels=EXAMPLE.read_text())
    return pytester


def run(pytester: pytest.Pytester, cache: Path, *args: str) -> pytest.RunResult:
    return pytester.runpytest("--aoti-device=cpu", f"--aoti-cache-dir={cache}", *args)


# --------------------------------------------------------------------------- pure logic


def test_ids_carry_no_query_characters() -> None:
    assert clean_id("hf:gpt2?attn_implementation=eager&n_layer=1") == (
        "hf:gpt2+attn_implementation:eager+n_layer:1"
    )
    assert clean_id("models/zoo.py:build resnet") == "models/zoo.py:build_resnet"


def test_a_factory_may_return_a_pair_a_triple_or_a_mapping() -> None:
    module = torch.nn.Linear(2, 2)
    x = torch.ones(1, 2)
    assert read_case((module, (x,)), "s", KEYWORDS).args == (x,)
    triple = read_case((module, [x], {"y": x}), "s", KEYWORDS)
    assert triple.args == (x,) and triple.kwargs == {"y": x}
    mapping = read_case(
        {"module": module, "args": x, "samples": [(x,)], "rtol": 1e-3}, "s", KEYWORDS
    )
    assert mapping.args == (x,) and mapping.check == {"samples": [(x,)], "rtol": 1e-3}


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        (
            torch.nn.Linear(2, 2),
            "s returned a Linear; expected (module, args), (module, args, kwargs)",
        ),
        (
            (torch.ones(1), (torch.ones(1),)),
            "s returned a Tensor as its module; expected a torch.nn.Module",
        ),
        ((torch.nn.Linear(2, 2), 3), "s returned a int as its args; expected a tuple of inputs"),
        ({"module": torch.nn.Linear(2, 2)}, "s returned a mapping without 'args'"),
        (
            {"module": torch.nn.Linear(2, 2), "args": (), "tol": 1},
            "s returned a mapping with unknown keys 'tol'",
        ),
    ],
)
def test_a_wrong_return_shape_says_what_is_accepted(returned: object, message: str) -> None:
    with pytest.raises(AotiUsageError) as caught:
        read_case(returned, "s", KEYWORDS)
    assert str(caught.value).startswith(message)


def test_a_mapping_takes_every_keyword_option_row() -> None:
    """aoti.check takes an option's keyword through ``**options``: so does a factory's mapping,
    also one a plugin's feature declares."""
    from dataclasses import dataclass

    from pytest_aoti.options.catalog import Catalog
    from pytest_aoti.options.feature import Feature
    from pytest_aoti.options.fields import per_check

    @dataclass(frozen=True)
    class LevelOptions:
        probe_level: int = per_check(1, "Probe level.", keyword=True)

    case = {"module": torch.nn.Linear(2, 2), "args": (torch.ones(1, 2),), "probe_level": 3}
    run = default_catalog()
    with pytest.raises(AotiUsageError, match="unknown keys 'probe_level'"):
        read_case(case, "s", run.check_keywords())
    catalog = Catalog([*run.features, Feature("level", "Levels", options=LevelOptions)])
    assert read_case(case, "s", catalog.check_keywords()).check == {"probe_level": 3}
    with pytest.raises(AotiUsageError, match="unknown keys 'options'"):
        read_case({**case, "options": {}}, "s", catalog.check_keywords())


def test_a_factory_is_seeded_and_given_the_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # resolving makes the rootdir importable
    (tmp_path / "seeded.py").write_text(
        "import torch\n"
        "def make(device):\n"
        "    return torch.nn.Identity(), (torch.randn(3, device=device),)\n"
    )
    [spec] = resolve_specs(["seeded.py:make"], tmp_path, tmp_path)
    first = call_factory(spec.factory, torch.device("cpu"), spec.text, KEYWORDS)
    torch.manual_seed(5)
    again = call_factory(spec.factory, torch.device("cpu"), spec.text, KEYWORDS)
    torch.testing.assert_close(first.args[0], again.args[0], rtol=0, atol=0)
    assert describe_inputs(first) == "input=(3,) float32"


def test_a_module_spec_imports_from_the_rootdir_under_plain_pytest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain ``pytest`` (unlike ``python -m pytest``) does not put the directory on sys.path."""
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(Path.cwd()))])
    monkeypatch.chdir(tmp_path.parent)
    (tmp_path / "rootdir_models.py").write_text("def make():\n    return None\n")
    monkeypatch.delitem(sys.modules, "rootdir_models", raising=False)
    [spec] = resolve_specs(["rootdir_models:make"], tmp_path, tmp_path.parent)
    assert spec.factory.__module__ == "rootdir_models"
    assert sys.path[0] == str(tmp_path)
    del sys.modules["rootdir_models"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nosuchmodule:build", "no module named 'nosuchmodule'; expected module.path:callable"),
        ("mymodels:nope", "'mymodels' has no attribute 'nope'; expected a callable or a list"),
        ("mymodels:EXAMPLE_SIZE", "expected a callable or a list or dict of callables, got int"),
        ("missing/zoo.py:good", "no file "),
        ("mymodels", "'mymodels': expected module.path:callable, path/to/file.py:callable"),
        ("hf:nosuchtype", "'nosuchtype' is no transformers model type and no config file"),
        ("hf:lama", "'lama' is no transformers model type and no config file; the closest: llama,"),
    ],
)
def test_a_spec_that_does_not_resolve_is_a_usage_error(
    factories: pytest.Pytester, spec: str, message: str
) -> None:
    factories.makepyfile(mymodels=EXAMPLE.read_text() + "\nEXAMPLE_SIZE = 3\n")
    if spec.startswith("hf:"):
        pytest.importorskip("transformers")
    result = factories.runpytest(f"--aoti-model={spec}", "--aoti-device=cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_an_hf_spec_without_transformers_says_what_to_install(
    factories: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # import now raises ImportError
    result = factories.runpytest("--aoti-model=hf:bert", "--aoti-device=cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        f"ERROR: --aoti-model=hf:bert: hf: specs need transformers: {install_hint('hf')}"
        in result.stderr.str()
    )


# --------------------------------------------------------------------------- collection


def test_spec_items_coexist_with_test_files_and_the_ini_list(factories: pytest.Pytester) -> None:
    factories.makepyfile(test_plain="def test_plain():\n    pass\n")
    factories.makeini("[pytest]\naoti_models =\n    mymodels:ALL\n    mymodels:good_dynamic\n")
    result = factories.runpytest(
        "--aoti-device=cpu", "--aoti-export=strict,non-strict", "--collect-only", "-q"
    )
    result.stdout.fnmatch_lines(
        [
            "test_plain.py::test_plain",
            "aoti-model::test_model[[]mymodels:ALL/good-cpu-strict[]]",
            "aoti-model::test_model[[]mymodels:ALL/good-cpu-non-strict[]]",
            "aoti-model::test_model[[]mymodels:ALL/broken-cpu-strict[]]",
            "aoti-model::test_model[[]mymodels:ALL/broken-cpu-non-strict[]]",
            "aoti-model::test_model[[]mymodels:good_dynamic-cpu-strict[]]",
            "aoti-model::test_model[[]mymodels:good_dynamic-cpu-non-strict[]]",
            "7 tests collected*",
        ]
    )
    # the command line replaces the ini list; with a path, the path is collected too
    result = factories.runpytest(
        "--aoti-device=cpu", "--aoti-model=mymodels:good", "test_plain.py", "--co", "-q"
    )
    result.stdout.fnmatch_lines(
        ["test_plain.py::test_plain", "aoti-model::test_model[[]mymodels:good-cpu[]]", "2 tests*"]
    )


def test_a_spec_on_the_command_line_without_paths_collects_the_specs_alone(
    factories: pytest.Pytester,
) -> None:
    """No path argument: neither the current directory nor ``testpaths`` is collected."""
    factories.makepyfile(test_plain="def test_plain():\n    pass\n")
    factories.mkdir("suite").joinpath("test_suite.py").write_text("def test_suite():\n    pass\n")
    for ini in ("[pytest]\n", "[pytest]\ntestpaths = suite\n"):
        factories.makeini(ini)
        result = factories.runpytest(
            "--aoti-device=cpu", "--aoti-model=mymodels:good", "--co", "-q"
        )
        result.stdout.fnmatch_lines(["aoti-model::test_model[[]mymodels:good-cpu[]]", "1 test*"])
        assert "test_plain" not in result.stdout.str()
        assert "test_suite" not in result.stdout.str()
    both = factories.runpytest(
        "--aoti-device=cpu", "--aoti-model=mymodels:good", "suite", ".", "--co", "-q"
    )
    both.stdout.fnmatch_lines(["*test_suite*", "*test_plain*", "*mymodels:good-cpu*", "3 tests*"])


def test_the_list_prints_each_spec_with_its_input_shapes(factories: pytest.Pytester) -> None:
    factories.makepyfile(
        zoo="""
        import torch

        def pair():
            return torch.nn.Bilinear(2, 2, 1), (torch.ones(3, 2), torch.ones(3, 2))

        def wrong():
            return 42
        """
    )
    result = factories.runpytest(
        "--aoti-models-list",
        "--aoti-model=mymodels:good_dynamic",
        "--aoti-model=zoo.py:pair",
        "--aoti-model=zoo.py:wrong",
    )
    result.stdout.fnmatch_lines(
        [
            "mymodels:good_dynamic: Mlp(x=(batch=4, 8) float32)",
            "zoo.py:pair: Bilinear(input1=(3, 2) float32, input2=(3, 2) float32)",
            "zoo.py:wrong: the factory failed: AotiUsageError: zoo.py:wrong returned a int; *",
        ]
    )
    assert "passed" not in result.stdout.str()
    assert result.ret == 1  # a factory that fails makes the listing fail


# --------------------------------------------------------------------------- running


@pytest.mark.compiles
def test_a_factory_module_alone_gives_one_pass_and_one_failure_with_its_stage(
    factories: pytest.Pytester, shared_cache_dir: Path
) -> None:
    result = run(
        factories,
        shared_cache_dir,
        "--aoti-model=mymodels:good",
        "--aoti-model=mymodels:broken",
        "--aoti-report=aoti.json",
        "-v",
    )
    result.assert_outcomes(passed=1, failed=1)
    # the never-compiled check's record names the stage the error carries
    records = json.loads((factories.path / "aoti.json").read_text())["checks"]
    broken = [record for record in records if "broken" in record["test"]]
    assert [record["finding"]["stage"] for record in broken] == ["export"]
    result.stdout.fnmatch_lines(
        [
            "aoti-model::test_model[[]mymodels:good-cpu[]] PASSED*",
            "aoti-model::test_model[[]mymodels:broken-cpu[]] FAILED*",
            "E   pytest_aoti.errors.AotiExportError: torch.export.export failed: *",
            "      at *mymodels.py:* in forward",
        ]
    )
    # the last failure reruns alone, by its id
    rerun = run(
        factories,
        shared_cache_dir,
        "--aoti-model=mymodels:good",
        "--aoti-model=mymodels:broken",
        "--lf",
        "-v",
    )
    rerun.assert_outcomes(failed=1)  # the passed spec is left out at collection
    deselected = run(
        factories,
        shared_cache_dir,
        "--aoti-model=mymodels:ALL",
        "--deselect=aoti-model::test_model[mymodels:ALL/broken-cpu]",
        "-k",
        "good",
    )
    deselected.assert_outcomes(passed=1, deselected=1)


@pytest.mark.compiles
def test_a_wrong_return_shape_fails_that_test_only(
    factories: pytest.Pytester, shared_cache_dir: Path
) -> None:
    factories.makepyfile(zoo="def no_inputs():\n    import torch\n    return torch.nn.ReLU()\n")
    result = run(
        factories, shared_cache_dir, "--aoti-model=zoo.py:no_inputs", "--aoti-model=mymodels:good"
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["E   pytest_aoti.errors.AotiUsageError: zoo.py:no_inputs returned a ReLU; expected *"]
    )


@pytest.mark.compiles
def test_a_collection_member_is_named_by_member(
    factories: pytest.Pytester, shared_cache_dir: Path
) -> None:
    factories.makepyfile(
        zoo="import torch\n\n\ndef relu():\n    return torch.nn.ReLU()\n\n\nZOO = {'bare': relu}\n"
    )
    result = run(factories, shared_cache_dir, "--aoti-model=zoo.py:ZOO")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["E   pytest_aoti.errors.AotiUsageError: zoo.py:ZOO/bare returned a ReLU; expected *"]
    )


@pytest.mark.compiles
def test_spec_items_run_the_same_under_xdist(
    factories: pytest.Pytester, shared_cache_dir: Path
) -> None:
    result = factories.runpytest_subprocess(
        "-n",
        "2",
        "--aoti-device=cpu",
        f"--aoti-cache-dir={shared_cache_dir}",
        "--aoti-model=mymodels:ALL",
        "--aoti-model=mymodels:good_dynamic",
        timeout=300,
    )
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["FAILED aoti-model::test_model[[]mymodels:ALL/broken-cpu[]]*"])
    bad = factories.runpytest_subprocess("-n", "2", "--aoti-model=mymodels:nope", timeout=120)
    assert bad.ret == pytest.ExitCode.USAGE_ERROR


# --------------------------------------------------------------------------- Hugging Face


def test_hf_overrides_go_to_the_config_and_the_model_class(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from pytest_aoti.models.hf import resolve_hf

    spec = resolve_hf("hf:gpt2?attn_implementation=eager&n_layer=1&resid_pdrop=0.5", tmp_path)
    case = call_factory(spec.factory, torch.device("cpu"), spec.text, KEYWORDS)
    assert isinstance(case.module, transformers.GPT2Model) and not case.module.training
    config = case.module.config
    assert (config.n_layer, config.resid_pdrop, config.use_cache) == (1, 0.5, False)
    assert config._attn_implementation == "eager"
    assert describe_inputs(case) == (
        "input_ids=(batch=2, seq=16) int64, attention_mask=(batch=2, seq=16) int64"
    )

    encoder = resolve_hf("hf:t5/T5EncoderModel", tmp_path)
    assert type(
        call_factory(encoder.factory, torch.device("cpu"), "t5", KEYWORDS).module
    ).__name__ == ("T5EncoderModel")

    saved = tmp_path / "tiny" / "config.json"
    saved.parent.mkdir()
    transformers.BertConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2
    ).to_json_file(saved)
    local = resolve_hf("hf:tiny/config.json?num_attention_heads=4", tmp_path)
    model = call_factory(local.factory, torch.device("cpu"), local.text, KEYWORDS).module
    assert (model.config.hidden_size, model.config.num_attention_heads) == (32, 4)
    assert json.loads(saved.read_text())["num_attention_heads"] == 2


@pytest.mark.compiles
def test_hf_architectures_pass_and_gpt2_sdpa_fails_in_decomposition(
    pytester: pytest.Pytester, shared_cache_dir: Path
) -> None:
    pytest.importorskip("transformers")
    # an encoder (ViT), decoders (Llama, GPT-2); BERT's encoder is the examples' own model
    result = run(
        pytester,
        shared_cache_dir,
        "--aoti-model=hf:vit",
        "--aoti-model=hf:llama",
        "--aoti-model=hf:gpt2",
        "--aoti-model=hf:gpt2?attn_implementation=eager",
        "--aoti-examples=4",
        "--aoti-report=aoti.json",
        "-v",
    )
    result.assert_outcomes(passed=3, failed=1)
    # run_decompositions raised AotiExportError: its record says decompose, not export
    records = json.loads((pytester.path / "aoti.json").read_text())["checks"]
    stages = {record["test"]: (record["finding"] or {}).get("stage") for record in records}
    assert stages["aoti-model::test_model[hf:gpt2-cpu]"] == "decompose"
    result.stdout.fnmatch_lines(
        [
            "aoti-model::test_model[[]hf:vit-cpu[]] PASSED*",
            "aoti-model::test_model[[]hf:llama-cpu[]] PASSED*",
            "aoti-model::test_model[[]hf:gpt2-cpu[]] FAILED*",
            "aoti-model::test_model[[]hf:gpt2+attn_implementation:eager-cpu[]] PASSED*",
            "E   pytest_aoti.errors.AotiExportError: run_decompositions failed: Cannot view a tensor*",
            "      at */transformers/pytorch_utils.py:* in forward",
        ]
    )


@pytest.mark.parametrize(
    ("model_type", "longest"), [("bert", 64), ("roberta", 62), ("distilbert", 64)]
)
def test_hf_sequences_stay_inside_the_position_table(
    tmp_path: Path, model_type: str, longest: int
) -> None:
    """RoBERTa's positions start after its padding index: 64 positions hold 62 tokens."""
    pytest.importorskip("transformers")
    from pytest_aoti.models.hf import resolve_hf

    spec = resolve_hf(f"hf:{model_type}", tmp_path)
    case = call_factory(spec.factory, torch.device("cpu"), spec.text, KEYWORDS)
    seq = case.check["dynamic_shapes"]["input_ids"][1]
    assert (seq.min, seq.max) == (2, longest)
    longest_ids = torch.zeros(1, longest, dtype=torch.long)
    with torch.no_grad():
        case.module(input_ids=longest_ids, attention_mask=torch.ones_like(longest_ids))
