"""Messages that point at the cause: the source line of a shape guard, hints for model-library
types and for the export mode in use. Exports only: nothing here compiles."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

from pytest_aoti.compiling.explain import for_mode, library_type_hint
from pytest_aoti.compiling.guards import Guard, GuardLog
from pytest_aoti.compiling.pipeline import export_module
from pytest_aoti.errors import AotiExportError

GUARDED = """
class AtLeastFour(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] < 4:  # the line that narrows b
            return x
        return x * 2


class ExactlyFour(torch.nn.Module):
    def forward(self, x):
        return x.reshape(2, 2, -1) if x.shape[0] == 4 else x  # pins b


def test_narrowed(aoti):
    aoti.compile(AtLeastFour(), (torch.ones(5, 3),), dynamic_shapes=({0: Dim("b", min=2)},))


def test_pinned(aoti):
    aoti.compile(ExactlyFour(), (torch.ones(4, 3),), dynamic_shapes=({0: Dim("b")},))
"""


def test_constraint_violation_names_the_line_that_added_the_guard(run_aoti) -> None:
    result = run_aoti("from torch.export import Dim\n" + GUARDED)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "E * torch.export.export failed: Constraints violated (b)!*",
            "E *guard b >= 4 on b (L[[]'x'].size()[[]0]) was added",
            "E *at *test_inner.py:* in forward",
            "E *if x.shape[[]0] < 4:  # the line that narrows b",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "E *guard Eq(b, 4) on b was added",
            "E *at *test_inner.py:* in forward",
            "E *return x.reshape(2, 2, -1) if x.shape[[]0] == 4 else x  # pins b",
        ]
    )


def test_guard_without_a_frame_outside_torch_says_source_unavailable() -> None:
    log = GuardLog(
        guards=[Guard("s3 >= 4", None), Guard("s3 <= 100", None)],
        symbols={"s3": ("L['x'].size()[0]", "2", "64")},
    )
    error = RuntimeError(
        "Constraints violated (b)!\n  - Not all values of b = L['x'].size()[0] in the "
        "specified range 2 <= b <= 64 satisfy the generated guard 4 <= L['x'].size()[0]"
    )
    assert log.explain(error) == ["  guard b >= 4 on b (L['x'].size()[0]): source unavailable"]
    assert GuardLog().explain(error) == ["  guard on b (L['x'].size()[0]): source unavailable"]
    assert log.explain(RuntimeError("something else")) == []


def test_bart_sequence_guard_names_modeling_bart() -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BartConfig(
        vocab_size=99,
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=100,
    )
    model = transformers.BartModel(config).eval()
    seq = Dim("seq", min=2, max=64)
    with pytest.raises(AotiExportError) as caught:
        export_module(
            model,
            (torch.randint(3, 99, (2, 8)),),
            {"use_cache": False},
            dynamic_shapes={"input_ids": {1: seq}, "use_cache": None},
        )
    message = str(caught.value)
    assert "guard seq - 1 >= 2 on seq (L['input_ids'].size()[1]) was added" in message, message
    assert "modeling_bart.py:" in message and "in shift_tokens_right" in message, message


def test_dynamic_cache_output_gets_cache_hints_not_a_mode_switch() -> None:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=99,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    with pytest.raises(AotiExportError) as caught:
        export_module(model, (torch.randint(0, 99, (2, 8)),), {})  # use_cache=True by default
    hint = str(caught.value).splitlines()[-1]
    assert hint.startswith("  What to try: DynamicCache is transformers' key/value cache"), hint
    assert "use_cache=False" in hint and "register_dynamic_cache_export_support()" in hint
    assert "strict=" not in hint


def test_hints_never_suggest_the_mode_in_use() -> None:
    generic = "What to try: strict=False (or strict=True), a dynamic_shapes spec"
    assert for_mode(generic, strict=False) == "What to try: strict=True, a dynamic_shapes spec"
    assert for_mode(generic, strict=True) == "What to try: strict=False, a dynamic_shapes spec"
    data = "an assert, export with strict=False and state the fact with torch._check(...)."
    assert for_mode(data, strict=False) == "an assert, state the fact with torch._check(...)."
    assert for_mode(data, strict=True) == data
    other = library_type_hint("Found <class 'mylib.Box'> in input, which is not a known type.")
    assert other is not None and "mylib.Box in the input is not a pytree type" in other
    assert library_type_hint("unrelated") is None
