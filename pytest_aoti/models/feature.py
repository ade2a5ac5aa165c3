"""Model specs, declared: the spec forms and the session options that name them
(see :class:`~pytest_aoti.options.feature.Feature`).

Pure data without torch; collecting the specs is :mod:`.collect`, its hooks :mod:`.plugin`.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

from pytest_aoti.api import Feature, Option, ValueKind, session_field

HF_PREFIX = "hf:"
TIMM_PREFIX = "timm:"
TORCHVISION_PREFIX = "torchvision:"
_NAMED_FORMS = {
    HF_PREFIX: "MODEL_TYPE such as hf:bert",
    TIMM_PREFIX: "NAME such as timm:resnet18",
    TORCHVISION_PREFIX: "NAME such as torchvision:resnet18",
}
"""Prefixes of specs that name a model in a library, each with its example name."""
_MODEL_SPEC_FORMS = (
    "module.path:callable, path/to/file.py:callable, hf:MODEL_TYPE, timm:NAME or torchvision:NAME"
)


_PLUGIN_PREFIX = re.compile(r"^[a-z][a-z0-9_-]*:(?![A-Za-z_][\w.]*$)")
"""``name:REST`` where REST is no Python name: another plugin's prefix (``golden:DIR``), which
that plugin resolves (a factory's ``module:callable`` ends in a name)."""


def parse_model_spec(text: str, *, strict: bool = False) -> str:
    """The form of an ``--aoti-model`` spec only: resolving it (importing the module,
    building an ``hf:`` config) waits for the rootdir, in ``pytest_aoti.models.model_spec``.
    A spec with another plugin's prefix passes here (not with ``strict``, once every
    plugin's prefixes are known): resolving says whether a plugin adds it."""
    spec = str(text).strip()
    for prefix, form in _NAMED_FORMS.items():
        if spec.startswith(prefix):
            if not spec[len(prefix) :].strip("?/"):
                raise argparse.ArgumentTypeError(f"{spec!r}: expected {prefix}{form}")
            return spec
    if not strict and _PLUGIN_PREFIX.match(spec):
        return spec
    target, _, name = spec.rpartition(":")
    if not target or not name or not name.replace(".", "").isidentifier():
        raise argparse.ArgumentTypeError(f"{spec!r}: expected {_MODEL_SPEC_FORMS}")
    return spec


@dataclass(frozen=True)
class ModelSettings:
    """The session options of model specs."""

    models: tuple[str, ...] = session_field(
        Option(
            "aoti-model",
            parse_model_spec,
            (),
            "Collect an AOTI test of this model spec, no test file needed: "
            "module.path:callable, path/to/file.py:callable (returning the module and its "
            "inputs; a list or dict of such callables), hf:MODEL_TYPE[?field=value&...], "
            "timm:NAME[?argument=value&...] or torchvision:NAME[?argument=value&...] (random "
            "weights). Repeatable; ini aoti_models, one per line. Default: none.",
            field="models",
            many=True,
            ini="aoti_models",
        )
    )
    models_list: bool = session_field(
        Option(
            "aoti-models-list",
            ValueKind.SWITCH.parse,
            False,
            "Print the --aoti-model specs that would be collected, with their inputs' "
            "shapes, and exit.",
            ini=None,
            flag=True,
        )
    )


MODELS = Feature(
    "models",
    "Model specs: AOTI tests of factories, hf:, timm: and torchvision: models collected "
    "with no test file",
    settings=ModelSettings,
)
