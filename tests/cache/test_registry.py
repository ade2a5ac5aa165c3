"""The registry's figures of a session: what it compiled, and what it took from the cache and
how long that took."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_aoti.cache.registry import ProgramRegistry
from pytest_aoti.cache.store import ArtifactStore
from pytest_aoti.compiling.program import CompiledArtifact
from pytest_aoti.mutation_maps import read_signature

CPU = torch.device("cpu")


class Double(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def test_a_load_from_the_cache_counts_the_time_its_lookup_took(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warm run's load time is what taking each package from the store took, its lookup
    (which verifies the entry) included: not only the link, which rounds to nothing."""
    exported = torch.export.export(Double(), (torch.ones(2),))

    def compiled(key: Any, exported: Any, configs: Any) -> tuple[CompiledArtifact, None]:
        package = tmp_path / "model.pt2"
        package.write_bytes(b"a package")
        artifact = CompiledArtifact(key, package, read_signature(exported), 1.0, cache_hit=False)
        return artifact, None

    cold = ProgramRegistry(tmp_path / "cold", ArtifactStore(tmp_path / "cache"))
    monkeypatch.setattr(cold, "_compile", compiled)
    cold.program_for(exported, device=CPU, inductor_configs=None)
    assert cold.stats.loaded == 0  # compiled (stood in for) and stored

    store = ArtifactStore(tmp_path / "cache")
    lookup = store.lookup

    def slow_lookup(key: str) -> Any:
        time.sleep(0.05)  # a verification that reads the package again
        return lookup(key)

    monkeypatch.setattr(store, "lookup", slow_lookup)
    warm = ProgramRegistry(tmp_path / "warm", store)
    program = warm.program_for(exported, device=CPU, inductor_configs=None)
    assert program.cache_hit and program.source == "local"
    assert (warm.stats.compiled, warm.stats.loaded) == (0, 1)
    assert warm.stats.load_seconds >= 0.05
