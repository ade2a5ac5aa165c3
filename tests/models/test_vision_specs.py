"""``--aoti-model=timm:NAME`` and ``torchvision:NAME``: name resolution, overrides, the input
size rules and a missing package, without compiling (stand-in ``timm`` and ``torchvision``
modules that list names and build a small conv net); one real run of each prefix where both
libraries are installed (``tox -e newest``), skipped elsewhere.
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_aoti.errors import AotiUsageError, install_hint
from pytest_aoti.models.collect import resolve_specs
from pytest_aoti.models.factories import call_factory, describe_inputs
from pytest_aoti.models.feature import parse_model_spec
from pytest_aoti.models.vision import literal, read_overrides
from pytest_aoti.plugins import default_catalog

# --------------------------------------------------------------------------- stand-ins

KEYWORDS = default_catalog().check_keywords()
"""The ``aoti.check`` keywords of a run of every default plugin."""


class Net(torch.nn.Module):
    """What the stand-in libraries build: records the keywords it was built with."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.kwargs = kwargs
        self.conv = torch.nn.Conv2d(kwargs.get("in_chans", 3), 4, 3)
        self.pretrained_cfg = {"input_size": (3, 96, 96)}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kwargs.get("img_size") == 64 and self.kwargs.get("fails_small"):
            raise RuntimeError("The size of tensor a (4) must match the size of tensor b (49)")
        return self.conv(x).mean((2, 3))


def fake_timm(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """``timm`` with four models: ``convy`` (any size), ``vity`` (fixed, takes img_size),
    ``levy`` (fixed, no img_size), ``effy`` (fixed, takes img_size=64, then fails at it)."""
    timm = types.ModuleType("timm")
    models = types.ModuleType("timm.models")

    class Cfg:
        def __init__(self, fixed: bool) -> None:
            self.input_size, self.fixed_input_size = (3, 96, 96), fixed

    cfgs = {"convy": Cfg(False), "vity": Cfg(True), "levy": Cfg(True), "effy": Cfg(True)}

    def create_model(name: str, pretrained: bool = False, **kwargs: Any) -> Net:
        assert pretrained is False
        if name == "levy" and "img_size" in kwargs:
            raise TypeError("Levy.__init__() got an unexpected keyword argument 'img_size'")
        if name == "effy":
            kwargs["fails_small"] = True
        if "bogus" in kwargs:
            raise TypeError("Net.__init__() got an unexpected keyword argument 'bogus'")
        return Net(**kwargs)

    timm.list_models = lambda: sorted(cfgs)  # type: ignore[attr-defined]
    timm.create_model = create_model  # type: ignore[attr-defined]
    timm.models = models  # type: ignore[attr-defined]
    models.get_pretrained_cfg = lambda name, allow_unregistered=True: cfgs[name]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "timm", timm)
    monkeypatch.setitem(sys.modules, "timm.models", models)
    return timm


def fake_torchvision(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """``torchvision.models`` with a classifier, a ViT, a video and a detection model."""
    torchvision = types.ModuleType("torchvision")
    models = types.ModuleType("torchvision.models")
    families = {"video": ["r3d_18"], "detection": ["fasterrcnn_tiny"]}
    for group, names in families.items():
        submodule = types.ModuleType(f"torchvision.models.{group}")
        submodule.names = names  # type: ignore[attr-defined]
        setattr(models, group, submodule)

    def list_models(module: Any = None) -> list[str]:
        if module is not None:
            return list(module.names)
        return ["resnet18", "vit_b_16", "r3d_18", "fasterrcnn_tiny"]

    def get_model(name: str, weights: Any = None, **kwargs: Any) -> Net:
        assert weights is None
        return Net(**kwargs)

    models.list_models = list_models  # type: ignore[attr-defined]
    models.get_model = get_model  # type: ignore[attr-defined]
    torchvision.models = models  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torchvision", torchvision)
    monkeypatch.setitem(sys.modules, "torchvision.models", models)
    return torchvision


def build(spec: str, tmp_path: Path) -> tuple[Any, Any]:
    """The resolved spec and its case, as the test of the spec would get it."""
    (resolved,) = resolve_specs([spec], tmp_path, tmp_path)
    return resolved, call_factory(resolved.factory, torch.device("cpu"), resolved.text, KEYWORDS)


# --------------------------------------------------------------------------- pure logic


@pytest.mark.parametrize("spec", ["timm:resnet18", "torchvision:vit_b_16?image_size=32"])
def test_the_vision_prefixes_are_spec_forms(spec: str) -> None:
    assert parse_model_spec(spec) == spec


@pytest.mark.parametrize("spec", ["timm:", "torchvision:?"])
def test_a_prefix_without_a_name_says_the_form(spec: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="expected .*:NAME such as"):
        parse_model_spec(spec)


def test_override_values_are_read_as_python_literals() -> None:
    query = "img_size=96&drop_rate=0.1&global_pool=avg&features_only=true&out_indices=[1,2]"
    assert read_overrides("timm:x", query) == {
        "img_size": 96,
        "drop_rate": 0.1,
        "global_pool": "avg",
        "features_only": True,
        "out_indices": [1, 2],
    }
    assert literal("None") is None


@pytest.mark.parametrize(
    ("query", "message"),
    [("a=1&a=2", "a is given twice"), ("1x=3", "'1x' is no keyword argument name")],
)
def test_bad_overrides_are_usage_errors(query: str, message: str) -> None:
    with pytest.raises(pytest.UsageError, match=message):
        read_overrides("timm:x", query)


def test_an_unknown_timm_name_names_it_and_the_closest(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_timm(monkeypatch)
    with pytest.raises(pytest.UsageError) as error:
        resolve_specs(["timm:vitty"], tmp_path, tmp_path)
    assert str(error.value) == (
        "--aoti-model=timm:vitty: timm has no model 'vitty'; the closest: vity "
        "(all: timm.list_models())"
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("timm:convy?pretrained=true", "pretrained would load weights"),
        ("timm:vity?img_size=4", "img_size=4: expected a whole number of pixels"),
        ("torchvision:resnet18?weights=DEFAULT", "weights would download weights"),
        ("torchvision:resnet19", "torchvision has no model 'resnet19'; the closest: resnet18"),
    ],
)
def test_specs_that_would_download_or_do_not_fit_are_usage_errors(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, spec: str, message: str
) -> None:
    fake_timm(monkeypatch)
    fake_torchvision(monkeypatch)
    with pytest.raises(pytest.UsageError, match=message):
        resolve_specs([spec], tmp_path, tmp_path)


@pytest.mark.parametrize(
    ("spec", "side", "built_with", "rule"),
    [
        ("timm:convy", 64, {}, "64×64: takes any size (its config: 96×96)"),
        ("timm:vity", 64, {"img_size": 64}, "img_size=64: fixed size made smaller (96×96)"),
        ("timm:levy", 96, {}, "96×96: its config's fixed size (no img_size=)"),
        ("timm:effy", 96, {"fails_small": True}, "96×96: its config's fixed size (it fails"),
        ("timm:vity?img_size=80", 80, {"img_size": 80}, "img_size=80 from the spec"),
        ("timm:convy?in_chans=1", 64, {"in_chans": 1}, "64×64: takes any size"),
    ],
)
def test_the_timm_input_size_rule_and_overrides(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    spec: str,
    side: int,
    built_with: dict[str, Any],
    rule: str,
) -> None:
    fake_timm(monkeypatch)
    resolved, case = build(spec, tmp_path)
    assert case.module.kwargs == built_with
    assert not case.module.training
    channels = built_with.get("in_chans", 3)
    assert describe_inputs(case) == f"x=(batch=2, {channels}, {side}, {side}) float32"
    assert resolved.factory.input_rule.startswith(rule)


def test_a_timm_override_the_model_does_not_take_fails_its_test_with_the_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_timm(monkeypatch)
    (resolved,) = resolve_specs(["timm:convy?bogus=1"], tmp_path, tmp_path)
    with pytest.raises(AotiUsageError, match="timm's convy takes no argument 'bogus'"):
        call_factory(resolved.factory, torch.device("cpu"), resolved.text, KEYWORDS)


@pytest.mark.parametrize(
    ("spec", "inputs", "rule"),
    [
        ("torchvision:resnet18", "x=(batch=2, 3, 64, 64) float32", "classification: 64×64"),
        ("torchvision:vit_b_16", "x=(batch=2, 3, 64, 64) float32", "classification: 64×64"),
        ("torchvision:r3d_18", "x=(batch=2, 3, 8, 64, 64) float32", "video: 8 frames of 64×64"),
        (
            "torchvision:fasterrcnn_tiny",
            "x=[(3, 320, 320) float32, (3, 320, 320) float32]",
            "detection: a list of 2 images",
        ),
    ],
)
def test_the_torchvision_inputs_follow_the_family(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, spec: str, inputs: str, rule: str
) -> None:
    fake_torchvision(monkeypatch)
    resolved, case = build(spec, tmp_path)
    assert describe_inputs(case) == inputs
    assert resolved.factory.input_rule.startswith(rule)
    expected = {"image_size": 64} if "vit" in spec else {}
    if "fasterrcnn" in spec:
        expected = {"weights_backbone": None}  # the backbone would download its weights
    assert case.module.kwargs == expected


# --------------------------------------------------------------------------- sessions


@pytest.mark.parametrize("spec", ["timm:resnet18", "torchvision:resnet18"])
def test_a_vision_spec_without_its_library_says_what_to_install(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, spec: str
) -> None:
    library = spec.partition(":")[0]
    monkeypatch.setitem(sys.modules, library, None)  # import now raises ImportError
    monkeypatch.setitem(sys.modules, f"{library}.models", None)
    result = pytester.runpytest(f"--aoti-model={spec}", "--aoti-device=cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    expected = f"ERROR: --aoti-model={spec}: {library}: specs need {library}: "
    assert expected + install_hint(library) in result.stderr.str()
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_an_unknown_name_exits_4_naming_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_timm(monkeypatch)
    result = pytester.runpytest("--aoti-model=timm:convey", "--aoti-device=cpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --aoti-model=timm:convey: timm has no model 'convey'*"])


def test_the_list_says_which_size_rule_applied(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_timm(monkeypatch)
    result = pytester.runpytest("--aoti-models-list", "--aoti-model=timm:levy")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["timm:levy: Net(x=(batch=2, 3, 96, 96) float32); input: 96×96: its config's fixed size*"]
    )


@pytest.mark.compiles
def test_a_timm_and_a_torchvision_model_pass_the_full_check(
    pytester: pytest.Pytester, shared_cache_dir: Path
) -> None:
    """Real libraries, real compiles: timm's tiny test ViT (fixed size, built at 64×64) and
    torchvision's SqueezeNet 1.1, with a dynamic batch, from an empty directory."""
    pytest.importorskip("timm")
    pytest.importorskip("torchvision")
    result = pytester.runpytest(
        "--aoti-model=timm:test_vit",
        "--aoti-model=torchvision:squeezenet1_1",
        "--aoti-device=cpu",
        f"--aoti-cache-dir={shared_cache_dir}",
        "--aoti-examples=4",
        "-v",
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "aoti-model::test_model[[]timm:test_vit-cpu[]] PASSED*",
            "aoti-model::test_model[[]torchvision:squeezenet1_1-cpu[]] PASSED*",
        ]
    )
