"""A decode loop whose cache is a dataclass, passed in and returned at every step."""

from dataclasses import dataclass

import pytest
import torch


@dataclass
class Cache:
    keys: torch.Tensor
    length: torch.Tensor


torch.export.register_dataclass(Cache, serialized_type_name="examples.test_decode_cache.Cache")


class Rolling(torch.nn.Module):
    """Keeps the last six projected tokens and returns their mean with the new cache."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, cache: Cache) -> tuple[torch.Tensor, Cache]:
        keys = torch.cat([cache.keys[1:], self.proj(x)], 0)
        return keys.mean(0, keepdim=True), Cache(keys, cache.length + 1)


def next_rolling(
    out: tuple[torch.Tensor, Cache], args: tuple[torch.Tensor, Cache], kwargs: dict[str, object]
) -> tuple[tuple[torch.Tensor, Cache], dict[str, object]]:
    summary, cache = out
    return (torch.tanh(summary), cache), {}


@pytest.mark.aoti
def test_rolling_cache_decodes_eight_steps(aoti):
    torch.manual_seed(0)
    cache = Cache(torch.randn(6, 8), torch.tensor(0))
    aoti.check(Rolling(), (torch.randn(1, 8), cache), steps=8, next_inputs=next_rolling)
