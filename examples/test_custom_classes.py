"""A custom class in and out: a dataclass cache passed in and returned, registered once for
torch.export with the serialized name an AOTI package stores it by."""

import dataclasses

import pytest
import torch


@dataclasses.dataclass
class KVCache:
    keys: torch.Tensor
    values: torch.Tensor


# once, where the class is defined: keys for every field, and the name the package stores
torch.export.register_dataclass(KVCache, serialized_type_name="test_custom_classes.KVCache")


class AppendStep(torch.nn.Module):
    """Appends this step's key and value to the cache and returns the longer cache."""

    def forward(self, cache: KVCache, k: torch.Tensor, v: torch.Tensor) -> KVCache:
        return KVCache(torch.cat([cache.keys, k], dim=1), torch.cat([cache.values, v], dim=1))


@pytest.mark.aoti
def test_dataclass_cache_in_and_out(aoti):
    torch.manual_seed(0)
    cache = KVCache(torch.randn(2, 5, 8), torch.randn(2, 5, 8))
    aoti.check(AppendStep(), (cache, torch.randn(2, 1, 8), torch.randn(2, 1, 8)))
