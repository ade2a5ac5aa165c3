"""``hf:MODEL_TYPE``: a Hugging Face architecture built from a tiny random config.

transformers' own config class, with small sizes (:data:`SMALL`), in eval mode, with no
download; the class built is the base model (``AutoModel``'s) unless the spec names one
(``hf:t5/T5EncoderModel``). Inputs follow the class's ``forward``: token ids and an attention
mask, decoder ids, pixel values, audio features or a waveform, with a dynamic batch and,
for tokens, a dynamic sequence. Overrides: ``hf:gpt2?attn_implementation=eager&n_layer=1``
(model-loading arguments to the model class, config fields to the config, each value
converted to the type of the config's default); a local config: ``hf:path/to/config.json``.

No torch or transformers at import time: this module loads at startup, where specs
resolve; transformers (an optional dependency) loads when an ``hf:`` spec is resolved, torch
when its model is built.
"""

from __future__ import annotations

import difflib
import inspect
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from pytest_aoti.api import AotiUsageError
from pytest_aoti.models.feature import HF_PREFIX
from pytest_aoti.models.model_spec import ModelSpec, clean_id, closest, usage_error


def install_transformers() -> str:
    return f"hf: specs need transformers: {AotiUsageError.install_hint('hf')} (or pip install transformers)"


LOADING_ARGS = ("attn_implementation", "dtype")
"""Spec overrides that go to the model class (``_from_config``), not to the config."""

_DTYPES = ("float32", "float64", "float16", "bfloat16")

VOCAB = 128
BATCH, SEQ, TARGET, IMAGE, WAVEFORM = 2, 16, 8, 32, 1600
"""Example sizes: batch, tokens, decoder tokens, image side, audio samples."""
MAX_BATCH = 8

SMALL: dict[str, Any] = {
    # sizes under the names the config classes use (set where the class has the field)
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "intermediate_size": 128,
    "max_position_embeddings": 64,
    "n_embd": 64,
    "n_layer": 2,
    "n_head": 2,
    "n_positions": 64,
    "dim": 64,
    "n_layers": 2,
    "n_heads": 2,
    "hidden_dim": 128,
    "d_model": 64,
    "d_ff": 128,
    "d_kv": 32,
    "num_layers": 2,
    "num_decoder_layers": 2,
    "num_heads": 2,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "max_source_positions": 32,
    "max_target_positions": 64,
    "image_size": IMAGE,
    "patch_size": 8,
    "hidden_sizes": [8, 16],
    "depths": [1, 1],
    "embedding_size": 8,
    "num_stages": 2,
    "conv_dim": [16] * 7,
    "num_conv_pos_embeddings": 16,
}

MEASURED_TYPES = (
    "bert",
    "distilbert",
    "roberta",
    "gpt2",
    "llama",
    "mistral",
    "qwen2",
    "phi",
    "t5",
    "bart",
    "vit",
    "whisper",
    "clip_vision_model",
    "resnet",
    "convnext",
    "wav2vec2",
    "hubert",
)
"""Model types measured through the full check (the specs page's table: all pass but GPT-2 with
SDPA attention, which fails in torch's run_decompositions). Other types of transformers
are built the same way, unmeasured."""


def transformers_module(spec: str) -> Any:
    try:
        import transformers
    except ImportError:
        raise usage_error(spec, install_transformers()) from None
    return transformers


def resolve_hf(text: str, rootpath: Path) -> ModelSpec:
    """Parse and resolve ``hf:TARGET[/Class][?overrides]``: the config is built now."""
    transformers = transformers_module(text)
    body, _, query = text[len(HF_PREFIX) :].partition("?")
    target, class_name = body, ""
    head, _, tail = body.rpartition("/")
    if head and tail[:1].isupper() and tail.isidentifier():
        target, class_name = head, tail
    overrides = dict(parse_qsl(query, keep_blank_values=True, strict_parsing=False))
    if query and not overrides:
        raise usage_error(text, "expected overrides as ?name=value&name=value")
    loading = {name: overrides.pop(name) for name in LOADING_ARGS if name in overrides}
    if "dtype" in loading and loading["dtype"] not in _DTYPES:
        raise usage_error(text, f"dtype={loading['dtype']}: expected one of {', '.join(_DTYPES)}")
    config = _config(text, target, rootpath, transformers)
    _apply_overrides(text, config, overrides)
    model_class = _model_class(text, config, class_name, transformers)
    if hasattr(config, "use_cache"):
        config.use_cache = False  # a cache in the outputs is no pytree node: export refuses it

    def build() -> dict[str, Any]:
        return build_case(model_class, config, loading)

    build.__qualname__ = build.__name__ = f"hf_{clean_id(body)}"
    return ModelSpec(text, clean_id(text), build)


def _config(spec: str, target: str, rootpath: Path, transformers: Any) -> Any:
    mapping = transformers.CONFIG_MAPPING
    if target in mapping:
        config_class = mapping[target]
        defaults = config_class().to_dict()
        small = {name: value for name, value in SMALL.items() if name in defaults}
        vocab = small.get("vocab_size", VOCAB)
        for name, value in defaults.items():
            # token ids of a full-size vocabulary point past the tiny one
            if name.endswith("_token_id") and isinstance(value, int) and value >= vocab:
                small[name] = vocab - 1
        return config_class(**small)
    path = Path(target).expanduser()
    path = path if path.is_absolute() else rootpath / path
    if path.exists():
        try:
            return transformers.AutoConfig.from_pretrained(str(path), local_files_only=True)
        except Exception as error:
            raise usage_error(spec, f"cannot read a config from {path}: {error}") from None
    raise usage_error(
        spec,
        f"{target!r} is no transformers model type and no config file{closest(target, mapping)}; "
        "expected hf:MODEL_TYPE "
        f"(e.g. {', '.join(MEASURED_TYPES[:6])}, ...), hf:path/to/config.json or "
        "hf:MODEL_TYPE/ModelClass",
    )


def _apply_overrides(spec: str, config: Any, overrides: Mapping[str, str]) -> None:
    for name, text in overrides.items():
        if not hasattr(config, name):
            fields = [*config.to_dict(), *LOADING_ARGS]
            close = difflib.get_close_matches(name, fields, n=3, cutoff=0.6)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise usage_error(
                spec,
                f"{type(config).__name__} has no field {name!r}{hint}; overrides are config "
                f"fields or model-loading arguments ({', '.join(LOADING_ARGS)})",
            )
        try:
            value = convert(text, getattr(config, name))
        except ValueError as error:
            raise usage_error(spec, f"{name}={text}: {error}") from None
        setattr(config, name, value)


def convert(text: str, default: Any) -> Any:
    """``text`` as a value of the type of ``default`` (bool, int, float, str, list); a None
    default takes a JSON literal or the text itself."""
    if isinstance(default, bool):
        word = text.strip().lower()
        if word in ("true", "1", "yes", "on"):
            return True
        if word in ("false", "0", "no", "off"):
            return False
        raise ValueError("expected true or false")
    if isinstance(default, int):
        try:
            return int(text)
        except ValueError:
            raise ValueError("expected a whole number") from None
    if isinstance(default, float):
        try:
            return float(text)
        except ValueError:
            raise ValueError("expected a number") from None
    if isinstance(default, str):
        return text
    try:
        value = json.loads(text)
    except ValueError:
        if isinstance(default, (list, tuple, dict)):
            raise ValueError(f"expected a JSON {type(default).__name__}") from None
        return text
    return tuple(value) if isinstance(default, tuple) and isinstance(value, list) else value


def _model_class(spec: str, config: Any, class_name: str, transformers: Any) -> Any:
    if class_name:
        model_class = getattr(transformers, class_name, None)
        if not (
            inspect.isclass(model_class) and issubclass(model_class, transformers.PreTrainedModel)
        ):
            raise usage_error(spec, f"transformers has no model class {class_name!r}")
        expected = getattr(model_class, "config_class", None)
        if expected is not None and not isinstance(config, expected):
            raise usage_error(
                spec,
                f"{class_name} takes a {expected.__name__}, not a {type(config).__name__}",
            )
        return model_class
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    name = MODEL_MAPPING_NAMES.get(config.model_type)
    if isinstance(name, (list, tuple)):
        name = name[0]
    model_class = getattr(transformers, name, None) if isinstance(name, str) else None
    if model_class is None:
        raise usage_error(
            spec,
            f"transformers has no base model for {config.model_type!r}; name one: "
            f"hf:{config.model_type}/ModelClass",
        )
    return model_class


def build_case(model_class: Any, config: Any, loading: Mapping[str, str]) -> dict[str, Any]:
    """The model in eval mode, its inputs and their dynamic dims (inside the test)."""
    import torch

    options: dict[str, Any] = dict(loading)
    if "dtype" in options:
        options["dtype"] = getattr(torch, options["dtype"])
    model = model_class._from_config(config, **options).eval()
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    kwargs, dynamic = model_inputs(model_class, config, dtype)
    return {"module": model, "args": (), "kwargs": kwargs, "dynamic_shapes": dynamic}


def model_inputs(
    model_class: Any, config: Any, dtype: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Inputs that fit the class's ``forward``, and their ``dynamic_shapes`` by name."""
    import torch
    from torch.export import Dim

    accepts = inspect.signature(model_class.forward).parameters
    batch = Dim("batch", min=1, max=MAX_BATCH)
    vocab = int(getattr(config, "vocab_size", VOCAB) or VOCAB)
    longest = _max_positions(config)
    kwargs: dict[str, Any] = {}
    dynamic: dict[str, Any] = {}
    if "input_ids" in accepts:
        seq = Dim("seq", min=2, max=longest)
        kwargs["input_ids"] = torch.randint(0, vocab, (BATCH, SEQ))
        dynamic["input_ids"] = {0: batch, 1: seq}
        if "attention_mask" in accepts:
            mask = torch.ones(BATCH, SEQ, dtype=torch.long)
            mask[-1, SEQ // 2 :] = 0  # the last row half padded
            kwargs["attention_mask"] = mask
            dynamic["attention_mask"] = {0: batch, 1: seq}
    if "decoder_input_ids" in accepts and getattr(config, "is_encoder_decoder", False):
        target_longest = int(getattr(config, "max_target_positions", longest) or longest)
        target = Dim("target", min=2, max=target_longest)
        kwargs["decoder_input_ids"] = torch.randint(0, vocab, (BATCH, TARGET))
        dynamic["decoder_input_ids"] = {0: batch, 1: target}
    if "pixel_values" in accepts:
        side = int(getattr(config, "image_size", IMAGE) or IMAGE)
        channels = int(getattr(config, "num_channels", 3) or 3)
        kwargs["pixel_values"] = torch.randn(BATCH, channels, side, side, dtype=dtype)
        dynamic["pixel_values"] = {0: batch}
    if "input_features" in accepts:
        frames = 2 * int(getattr(config, "max_source_positions", 1500))
        bins = int(getattr(config, "num_mel_bins", 80))
        kwargs["input_features"] = torch.randn(BATCH, bins, frames, dtype=dtype)
        dynamic["input_features"] = {0: batch}
    if "input_values" in accepts:
        kwargs["input_values"] = torch.randn(BATCH, WAVEFORM, dtype=dtype)
        dynamic["input_values"] = {0: batch}
    if not kwargs:
        raise ValueError(
            f"{model_class.__name__}.forward takes none of input_ids, pixel_values, "
            "input_features, input_values: no inputs can be made for it"
        )
    return kwargs, dynamic


_POSITION_OFFSET = {"roberta": 2, "xlm-roberta": 2, "camembert": 2, "data2vec-text": 2}
"""Model types whose positions start after the padding index: fewer tokens fit."""


def _max_positions(config: Any) -> int:
    offset = _POSITION_OFFSET.get(getattr(config, "model_type", ""), 0)
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value - offset >= 2:
            return min(value - offset, 64)
    return 64
