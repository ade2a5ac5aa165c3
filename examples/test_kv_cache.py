"""The motivating use: write one decoding step into a large KV cache in place, no copy."""

import pytest
import torch

BATCH, HEADS, MAX_SEQ, HEAD_DIM = 2, 4, 256, 16


class KVCacheStep(torch.nn.Module):
    """Writes this step's keys and values at ``position`` and attends over the cache."""

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        position: torch.Tensor,
    ) -> torch.Tensor:
        k_cache.index_copy_(2, position, k)
        v_cache.index_copy_(2, position, v)
        scores = q @ k_cache.transpose(-1, -2) / HEAD_DIM**0.5
        return torch.softmax(scores, dim=-1) @ v_cache


def step_inputs(position: int) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(position)
    q, k, v = (torch.randn(BATCH, HEADS, 1, HEAD_DIM, generator=generator) for _ in range(3))
    k_cache = torch.randn(BATCH, HEADS, MAX_SEQ, HEAD_DIM, generator=generator)
    v_cache = torch.randn(BATCH, HEADS, MAX_SEQ, HEAD_DIM, generator=generator)
    return q, k, v, k_cache, v_cache, torch.tensor([position])


def written(cache: torch.Tensor, step: torch.Tensor, position: int) -> torch.Tensor:
    expected = cache.clone()
    expected[:, :, position] = step[:, :, 0]
    return expected


@pytest.mark.aoti
def test_kv_cache_step_updates_caches_in_place(aoti):
    q, k, v, k_cache, v_cache, position = step_inputs(position=17)
    aoti.check(
        KVCacheStep(),
        (q, k, v, k_cache, v_cache, position),
        mutates={"k_cache": written(k_cache, k, 17), "v_cache": written(v_cache, v, 17)},
        # no copy of a cache per step: far less than one cache's size (measured on CUDA;
        # on the CPU the terminal summary says it was not measured)
        max_extra_bytes=k_cache.nbytes // 4,
    )


@pytest.mark.aoti
def test_kv_cache_engine_reuses_callers_storage(aoti):
    inputs = step_inputs(position=0)
    program = aoti.compile(KVCacheStep(), inputs)
    assert program.mutated_inputs == {"k_cache", "v_cache"}
    # the engine takes inputs on its own device
    q, k, v, k_cache, v_cache, _ = (t.to(aoti.device) for t in step_inputs(position=0))
    address = k_cache.data_ptr()
    for position in (3, 4, 5):
        program(q, k, v, k_cache, v_cache, torch.tensor([position], device=aoti.device))
    assert k_cache.data_ptr() == address
    for position in (3, 4, 5):
        torch.testing.assert_close(k_cache[:, :, position], k[:, :, 0])


@pytest.mark.aoti
def test_kv_cache_step_is_thread_safe(aoti):
    """Each caller owns its caches, so one engine can serve several threads at once: four
    threads, each with caches of its own, get what eager gives them."""
    aoti.check(KVCacheStep(), step_inputs(position=17), threads=4, calls=2)


class KVCacheDecoder(torch.nn.Module):
    """The same step with the caches kept as registered buffers: the state a decoder carries
    from step to step, which no output returns."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        shape = (BATCH, HEADS, MAX_SEQ, HEAD_DIM)
        self.register_buffer("k_cache", torch.randn(shape, generator=generator))
        self.register_buffer("v_cache", torch.randn(shape, generator=generator))

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, position: torch.Tensor
    ) -> torch.Tensor:
        self.k_cache.index_copy_(2, position, k)
        self.v_cache.index_copy_(2, position, v)
        scores = q @ self.k_cache.transpose(-1, -2) / HEAD_DIM**0.5
        return torch.softmax(scores, dim=-1) @ self.v_cache


@pytest.mark.aoti
def test_kv_cache_buffers_match_eager_after_each_step(aoti):
    """The engine's caches are read back and compared with eager's after every call."""
    q, k, v, *_ = step_inputs(position=17)
    result = aoti.check(
        KVCacheDecoder(),
        (q, k, v, torch.tensor([17])),
        mutated_buffers={"k_cache", "v_cache"},
        calls=3,
        # no copy of a cache per step: a quarter of one cache (4-byte floats)
        max_extra_bytes=BATCH * HEADS * MAX_SEQ * HEAD_DIM,
    )
    compared = {state.name: state.calls_compared for state in result.buffers}
    assert compared == {"k_cache": 3, "v_cache": 3}


def next_step(
    out: torch.Tensor, args: tuple[torch.Tensor, ...], kwargs: dict[str, torch.Tensor]
) -> tuple[tuple[torch.Tensor, ...], dict[str, torch.Tensor]]:
    """The next decoding step's inputs from this one's attention output: its query, key and
    value, the same caches (written in place) and the next position."""
    _, _, _, k_cache, v_cache, position = args
    return (out, out * 0.5, torch.tanh(out), k_cache, v_cache, position + 1), {}


@pytest.mark.aoti
def test_kv_cache_decodes_sixteen_steps(aoti):
    """A decode loop: each side feeds its own outputs into its next step, compared at every
    step (the same program as the single step: nothing more is compiled)."""
    aoti.check(KVCacheStep(), step_inputs(position=17), steps=16, next_inputs=next_step)


def next_decoder_step(
    out: torch.Tensor, args: tuple[torch.Tensor, ...], kwargs: dict[str, torch.Tensor]
) -> tuple[tuple[torch.Tensor, ...], dict[str, torch.Tensor]]:
    """The buffer decoder's next step: the caches are its own state."""
    *_, position = args
    return (out, out * 0.5, torch.tanh(out), position + 1), {}


@pytest.mark.aoti
def test_kv_cache_decoder_caches_match_eager_at_every_step(aoti):
    """The decoder's caches, registered buffers, read back from the engine after every step."""
    q, k, v, *_ = step_inputs(position=17)
    aoti.check(
        KVCacheDecoder(),
        (q, k, v, torch.tensor([17])),
        mutated_buffers={"k_cache", "v_cache"},
        steps=8,
        next_inputs=next_decoder_step,
    )
