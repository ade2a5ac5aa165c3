"""``torchvision:NAME[?overrides]``: a torchvision model with random weights, nothing
downloaded.

The name is looked up in ``torchvision.models.list_models()`` at startup (the closest names
when it is not there); the model is built inside its test:
``torchvision.models.get_model(NAME, weights=None, **overrides)`` after
``torch.manual_seed(0)``, in eval mode. Its input follows the model's family
(:data:`FAMILIES`): an image batch (classification, segmentation), a clip batch (video),
both with a dynamic batch dim; a list of images (detection: no batch dim); two frames
(optical flow). A model of fixed size keeps it (:data:`FIXED_SIDES`), ViTs are built with
``image_size=64``; ``--aoti-models-list`` prints the rule that applied.

No torch or torchvision at import time: this module loads at startup, where specs resolve;
torchvision (an optional dependency, which imports torch) loads when a ``torchvision:``
spec is resolved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_aoti.api import AotiUsageError
from pytest_aoti.models.feature import TORCHVISION_PREFIX
from pytest_aoti.models.model_spec import ModelSpec, clean_id, usage_error
from pytest_aoti.models.vision import (
    BATCH,
    SIDE,
    check_name,
    check_side,
    image_case,
    read_overrides,
    split_spec,
    unexpected_keyword,
)

FAMILIES = ("detection", "segmentation", "video", "optical_flow", "quantization")
"""Submodules of ``torchvision.models`` whose models take other inputs than an image batch
(quantization: an image batch, from eager int8 kernels); the rest is classification."""

FIXED_SIDES = {"maxvit_t": 224, "inception_v3": 96, "s3d": 224, "mvit_v1_b": 224, "mvit_v2_s": 224}
"""Models whose layers need a given image side (maxvit's windows, inception's and s3d's
fixed pooling, mvit's positions); inception takes any side from 75 up."""
FRAMES = {"s3d": 16, "mvit_v1_b": 16, "mvit_v2_s": 16}
"""Clip lengths of video models that need more than :data:`CLIP` frames."""
CLIP = 8
DETECTION_SIDE = 320
FLOW_SIDE = 128

NOT_OVERRIDES = ("weights", "weights_backbone")
"""``get_model`` arguments a spec may not set: they would download weights."""
WITH_BACKBONE = ("detection", "segmentation")
"""Families whose backbone downloads its weights unless ``weights_backbone=None``."""
EXPLICIT_INIT = ("googlenet", "inception_v3")
"""Models that warn (FutureWarning) unless ``init_weights`` is given."""


def install_torchvision() -> str:
    return (
        f"torchvision: specs need torchvision: {AotiUsageError.install_hint('torchvision')} (or pip install "
        "the torchvision release that matches your torch)"
    )


def torchvision_models(spec: str) -> Any:
    try:
        import torchvision.models
    except ImportError:
        raise usage_error(spec, install_torchvision()) from None
    return torchvision.models


def resolve_torchvision(text: str, rootpath: Path) -> ModelSpec:
    """Parse and resolve ``torchvision:NAME[?overrides]``: the name checked now, the model
    built in its test."""
    del rootpath  # torchvision names are global; the argument keeps the resolvers' signature
    models = torchvision_models(text)
    name, query = split_spec(text, TORCHVISION_PREFIX)
    check_name(text, name, models.list_models(), "torchvision", "torchvision.models.list_models()")
    overrides = read_overrides(text, query)
    for argument in NOT_OVERRIDES:
        if overrides.get(argument) is not None:
            raise usage_error(text, f"{argument} would download weights; a spec builds random ones")
    if "image_size" in overrides:
        overrides["image_size"] = check_side(text, "image_size", overrides["image_size"])
    factory = TorchvisionFactory(text, name, overrides, family(models, name))
    return ModelSpec(text, clean_id(text), factory)


def family(models: Any, name: str) -> str:
    """The :data:`FAMILIES` entry ``name`` belongs to, else ``classification``."""
    for group in FAMILIES:
        submodule = getattr(models, group, None)
        if submodule is not None and name in models.list_models(module=submodule):
            return group
    return "classification"


class TorchvisionFactory:
    """Builds the model and its inputs inside the test; :attr:`input_rule` says which."""

    def __init__(self, spec: str, name: str, overrides: dict[str, Any], group: str) -> None:
        self.spec, self.name, self.overrides, self.family = spec, name, overrides, group
        self.input_rule = self._rule()
        self.__name__ = f"torchvision_{clean_id(name)}"

    def _side(self) -> int:
        if "image_size" in self.overrides:
            return int(self.overrides["image_size"])
        if self.name.startswith("vit_"):
            return SIDE
        if self.family == "detection":
            return DETECTION_SIDE
        if self.family == "optical_flow":
            return FLOW_SIDE
        return FIXED_SIDES.get(self.name, SIDE)

    def _rule(self) -> str:
        side = self._side()
        where = (
            "from the spec"
            if "image_size" in self.overrides
            else "image_size= made smaller"
            if self.name.startswith("vit_")
            else "its fixed size"
            if self.name in FIXED_SIDES
            else "takes any size"
        )
        if self.family == "video":
            return f"{self.family}: {FRAMES.get(self.name, CLIP)} frames of {side}×{side} ({where})"
        if self.family == "detection":
            return f"detection: a list of {BATCH} images {side}×{side}, no dynamic batch"
        if self.family == "optical_flow":
            return f"optical flow: two frames {side}×{side}"
        return f"{self.family}: {side}×{side} ({where})"

    def __call__(self) -> dict[str, Any]:
        import torch

        overrides = dict(self.overrides)
        side = self._side()
        if self.name.startswith("vit_"):
            overrides["image_size"] = side
        if self.family in WITH_BACKBONE:
            overrides["weights_backbone"] = None
        if self.name in EXPLICIT_INIT:
            overrides.setdefault("init_weights", False)
        model = self._create(**overrides).eval()
        if self.family == "detection":
            images = [torch.rand(3, side, side) for _ in range(BATCH)]
            return {"module": model, "args": (images,)}
        if self.family == "optical_flow":
            first, second = torch.rand(2, BATCH, 3, side, side)
            return {"module": model, "args": (first, second)}
        if self.family == "video":
            return image_case(model, (3, FRAMES.get(self.name, CLIP), side, side))
        return image_case(model, (3, side, side))

    def _create(self, **overrides: Any) -> Any:
        import torchvision.models

        try:
            return torchvision.models.get_model(self.name, weights=None, **overrides)
        except TypeError as error:
            argument = unexpected_keyword(error)
            if argument is None or argument not in overrides:
                raise
            raise AotiUsageError(
                f"{self.spec}: torchvision's {self.name} takes no argument {argument!r}; "
                "overrides are torchvision.models.get_model keyword arguments of this model"
            ) from None
