"""Real Hugging Face models, built from tiny configs with random weights (nothing downloaded).

Needs ``transformers`` (``tox -e transformers``); skipped without it.

The models go in as users call them, with no wrapper: ``attention_mask`` (and for BERT
``token_type_ids``) as keyword inputs, ``dynamic_shapes`` keyed by argument name, and the
default ``return_dict=True``. Their outputs (``BaseModelOutputWithPoolingAndCrossAttentions``,
``CausalLMOutputWithCrossAttentions``) are ``ModelOutput`` subclasses, which transformers
registers as pytree nodes: every tensor in them is compared, and the engine returns the same
class. ``return_dict=False`` (a plain tuple) works as well. One compile per model, about
15-25 s on 2 cores.
"""

import pytest
import torch
from torch.export import Dim

transformers = pytest.importorskip("transformers")

VOCAB = 128
BATCH = Dim("batch", min=1, max=8)
SEQ = Dim("seq", min=2, max=64)  # up to max_position_embeddings
DYNAMIC = {
    "input_ids": {0: BATCH, 1: SEQ},
    "attention_mask": {0: BATCH, 1: SEQ},
    "token_type_ids": {0: BATCH, 1: SEQ},
}


def tiny_bert() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=64,
    )
    return transformers.BertModel(config).eval()


def token_inputs(batch: int, seq: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Token ids, and as keywords a padding mask (last row half padded) and two segments."""
    input_ids = torch.randint(0, VOCAB, (batch, seq))
    attention_mask = torch.ones(batch, seq, dtype=torch.long)
    attention_mask[-1, seq // 2 :] = 0
    token_type_ids = torch.zeros(batch, seq, dtype=torch.long)
    token_type_ids[:, seq // 2 :] = 1
    return input_ids, {"attention_mask": attention_mask, "token_type_ids": token_type_ids}


def on_device(
    device: torch.device, input_ids: torch.Tensor, kwargs: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The engine takes its inputs on the device it was compiled for."""
    return input_ids.to(device), {name: value.to(device) for name, value in kwargs.items()}


@pytest.mark.aoti(examples=8)
def test_bert_dynamic_batch_and_sequence(aoti):
    model = tiny_bert()
    torch.manual_seed(1)
    input_ids, kwargs = token_inputs(2, 16)
    # one compile; then the boundary shapes and 8 generated (batch, seq) inside the ranges
    result = aoti.check(model, (input_ids,), kwargs, dynamic_shapes=DYNAMIC)
    assert result.figures["examples"] >= 8

    # the engine is the deployable artifact: called like the model, at a shape of our own,
    # it returns the same ModelOutput with the same values
    input_ids, kwargs = on_device(aoti.device, *token_inputs(5, 37))
    engine_output = result.program(input_ids, **kwargs)
    with torch.no_grad():
        eager_output = model.to(aoti.device)(input_ids, **kwargs)
    assert type(engine_output) is type(eager_output)
    torch.testing.assert_close(engine_output.last_hidden_state, eager_output.last_hidden_state)
    torch.testing.assert_close(engine_output.pooler_output, eager_output.pooler_output)


def tiny_gpt2() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=VOCAB,
        n_positions=64,
        n_embd=64,
        n_layer=2,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
        # the default DynamicCache in the output is no pytree node: export refuses it
        use_cache=False,
        # with the default "sdpa", run_decompositions() fails in Conv1D's x.view(-1, ...)
        # ("Cannot view a tensor with shape [s0, s1, 64] and strides (64, 64*s0, 1)"):
        # the decomposition lays the attention output out differently from eager
        attn_implementation="eager",
    )
    return transformers.GPT2LMHeadModel(config).eval()


@pytest.mark.aoti(examples=8)
def test_gpt2_dynamic_batch_and_sequence(aoti):
    model = tiny_gpt2()
    torch.manual_seed(1)
    input_ids, kwargs = token_inputs(2, 16)
    del kwargs["token_type_ids"]
    dynamic = {name: DYNAMIC[name] for name in ("input_ids", "attention_mask")}
    result = aoti.check(model, (input_ids,), kwargs, dynamic_shapes=dynamic)
    assert result.figures["examples"] >= 8

    # greedy decoding picks the same next tokens from the engine as from eager
    input_ids, kwargs = token_inputs(3, 40)
    del kwargs["token_type_ids"]
    input_ids, kwargs = on_device(aoti.device, input_ids, kwargs)
    engine_logits = result.program(input_ids, **kwargs).logits
    with torch.no_grad():
        eager_logits = model.to(aoti.device)(input_ids, **kwargs).logits
    assert torch.equal(engine_logits[:, -1].argmax(-1), eager_logits[:, -1].argmax(-1))
