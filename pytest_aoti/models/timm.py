"""``timm:NAME[?overrides]``: a timm architecture with random weights, nothing downloaded.

The name is looked up in ``timm.list_models()`` at startup (the closest names when it is
not there); the model is built inside its test: ``timm.create_model(NAME,
pretrained=False, **overrides)`` after ``torch.manual_seed(0)``, in eval mode. Its input is
one image batch with a dynamic batch dim, sized by the first rule that applies
(:class:`TimmFactory` records which, ``--aoti-models-list`` prints it):

- ``img_size=`` among the overrides: that size;
- a model that takes any size (``fixed_input_size`` false in its config, convnets): 64×64;
- a model of fixed size (ViT-style) that takes ``img_size=`` and runs at it: built with
  ``img_size=64``;
- else the config's own ``input_size`` (EfficientFormer: 224×224).

Overrides are ``create_model`` keyword arguments (``timm:vit_tiny_patch16_224?img_size=96``),
each value a number, true/false, a JSON list or text; a name the model does not take fails
its test with the name.

No torch or timm at import time: this module loads at startup, where specs resolve; timm
(an optional dependency, which imports torch) loads when a ``timm:`` spec is resolved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_aoti.api import AotiUsageError
from pytest_aoti.models.feature import TIMM_PREFIX
from pytest_aoti.models.model_spec import ModelSpec, clean_id, usage_error
from pytest_aoti.models.vision import (
    SIDE,
    check_name,
    check_side,
    image_case,
    read_overrides,
    split_spec,
    unexpected_keyword,
)

NOT_OVERRIDES = ("pretrained", "pretrained_cfg", "pretrained_cfg_overlay", "checkpoint_path")
"""``create_model`` arguments a spec may not set: they would load weights."""


def install_timm() -> str:
    return f"timm: specs need timm: {AotiUsageError.install_hint('timm')} (or pip install timm)"


def timm_module(spec: str) -> Any:
    try:
        import timm
    except ImportError:
        raise usage_error(spec, install_timm()) from None
    return timm


def resolve_timm(text: str, rootpath: Path) -> ModelSpec:
    """Parse and resolve ``timm:NAME[?overrides]``: the name checked now, the model built
    in its test."""
    del rootpath  # timm names are global; the argument keeps the resolvers' one signature
    timm = timm_module(text)
    name, query = split_spec(text, TIMM_PREFIX)
    architecture = name.partition(".")[0]  # resnet18.a1_in1k: the architecture's config tag
    check_name(text, architecture, timm.list_models(), "timm", "timm.list_models()")
    overrides = read_overrides(text, query)
    for argument in NOT_OVERRIDES:
        if argument in overrides:
            raise usage_error(text, f"{argument} would load weights; a spec builds random ones")
    if "img_size" in overrides:
        overrides["img_size"] = check_side(text, "img_size", overrides["img_size"])
    cfg = _pretrained_cfg(timm, name)
    factory = TimmFactory(text, name, overrides, tuple(cfg.input_size), cfg.fixed_input_size)
    return ModelSpec(text, clean_id(text), factory)


def _pretrained_cfg(timm: Any, name: str) -> Any:
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(name, allow_unregistered=True)
    if cfg is None:  # an architecture with no config: timm's defaults
        from timm.models import PretrainedCfg

        cfg = PretrainedCfg()
    return cfg


class TimmFactory:
    """Builds the model and its input inside the test; :attr:`input_rule` says which size
    rule applied (before the first build: the rule expected from the config)."""

    def __init__(
        self,
        spec: str,
        name: str,
        overrides: dict[str, Any],
        config_size: tuple[int, ...],
        fixed_size: bool,
    ) -> None:
        self.spec, self.name, self.overrides = spec, name, overrides
        self.channels = int(overrides.get("in_chans", config_size[0]))
        self.config_side = f"{config_size[1]}×{config_size[2]}"
        self.fixed_size = fixed_size
        self.input_rule = self._expected_rule()
        self.__name__ = f"timm_{clean_id(name)}"

    def _expected_rule(self) -> str:
        if "img_size" in self.overrides:
            return f"img_size={self.overrides['img_size']} from the spec"
        if not self.fixed_size:
            return f"{SIDE}×{SIDE}: takes any size (its config: {self.config_side})"
        return f"img_size={SIDE} where the model takes it, else its config's {self.config_side}"

    def __call__(self) -> dict[str, Any]:
        import torch

        side: int
        if "img_size" in self.overrides:
            side = self.overrides["img_size"]
            model = self._create(**self.overrides)
        elif not self.fixed_size:
            side = SIDE
            model = self._create(**self.overrides)
            self.input_rule = f"{SIDE}×{SIDE}: takes any size (its config: {self.config_side})"
        else:
            model, why = self._smaller()
            if model is not None:
                side = SIDE
                self.input_rule = f"img_size={SIDE}: fixed size made smaller ({self.config_side})"
            else:
                torch.manual_seed(0)  # the same weights as a first build would draw
                model = self._create(**self.overrides)
                side = int(model.pretrained_cfg["input_size"][-1])
                self.input_rule = f"{side}×{side}: its config's fixed size ({why})"
        dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
        return image_case(model.eval(), (self.channels, side, side), dtype)

    def _smaller(self) -> tuple[Any, str]:
        """The model built with ``img_size=SIDE`` if its class takes it and it runs at that
        size in eager (EfficientFormer takes it, then fails: its attention keeps 7×7),
        else None and why not."""
        import timm
        import torch

        try:
            model = timm.create_model(self.name, pretrained=False, img_size=SIDE, **self.overrides)
        except TypeError as error:
            if unexpected_keyword(error) != "img_size":
                raise
            return None, "no img_size="
        try:
            with torch.no_grad():
                model.eval()(torch.zeros(1, self.channels, SIDE, SIDE))
        except Exception:
            return None, f"it fails at img_size={SIDE}"
        return model, ""

    def _create(self, **overrides: Any) -> Any:
        import timm

        try:
            return timm.create_model(self.name, pretrained=False, **overrides)
        except TypeError as error:
            argument = unexpected_keyword(error)
            if argument is None or argument not in overrides:
                raise
            raise AotiUsageError(
                f"{self.spec}: timm's {self.name} takes no argument {argument!r}; overrides "
                "are timm.create_model keyword arguments of this model"
            ) from None
