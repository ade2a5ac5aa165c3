"""What the session keeps of a program once its tests are done: engines and weights."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest
import torch

from pytest_aoti.cache.registry import ProgramRegistry
from pytest_aoti.compiling.program import EnginePool

CPU = torch.device("cpu")
MB = 2**20


class FakeEngine:
    def __init__(self, key: str) -> None:
        self.key = key


class Loads:
    """Engines by key, loading a new one (and counting it) on every call."""

    def __init__(self) -> None:
        self.count: dict[str, int] = {}

    def get(self, pool: EnginePool, key: str, size: int = MB) -> FakeEngine:
        def load() -> FakeEngine:
            self.count[key] = self.count.get(key, 0) + 1
            return FakeEngine(key)

        engine = pool.get(key, CPU, size, load)
        assert isinstance(engine, FakeEngine)
        return engine


def test_small_engines_stay_loaded_for_the_session() -> None:
    pool, loads = EnginePool(budget=10 * MB), Loads()
    for _ in range(3):
        for key in "abcd":
            loads.get(pool, key)
    assert loads.count == dict.fromkeys("abcd", 1)


def test_large_engines_are_dropped_once_another_is_used() -> None:
    pool, loads = EnginePool(budget=100 * MB), Loads()
    first = weakref.ref(loads.get(pool, "a", 66 * MB))
    gc.collect()
    assert first() is not None  # the latest engine stays loaded
    latest = weakref.ref(loads.get(pool, "b", 66 * MB))
    gc.collect()
    assert first() is None  # its weights freed: the two do not fit the budget
    assert latest() is not None


def test_the_session_end_frees_every_engine_kept_loaded() -> None:
    # a kept engine outlives the session's objects otherwise, and the folder it unpacked
    # its package to stays behind
    pool, loads = EnginePool(budget=100 * MB), Loads()
    kept = [weakref.ref(loads.get(pool, key)) for key in "ab"]
    gc.collect()
    assert all(engine() is not None for engine in kept)
    pool.clear()
    gc.collect()
    assert all(engine() is None for engine in kept)


def test_the_pool_says_whether_a_dropped_engine_is_still_held() -> None:
    # the session's end collects garbage (a walk of every object the compiler left) only
    # where an engine outlives the pool: held elsewhere or in a reference cycle
    pool, loads = EnginePool(budget=100 * MB), Loads()
    loads.get(pool, "a")
    assert pool.clear() == 1
    assert pool.alive == 0  # freed as its last reference went: nothing to collect
    gc.disable()  # no automatic collection between the two reads
    try:
        cyclic = loads.get(pool, "b")
        cyclic.itself = cyclic  # type: ignore[attr-defined]
        del cyclic
        assert pool.clear() == 1
        assert pool.alive == 1
        gc.collect()
        assert pool.alive == 0
    finally:
        gc.enable()


def test_an_engine_in_use_is_never_loaded_twice() -> None:
    pool, loads = EnginePool(budget=0), Loads()
    held = loads.get(pool, "a")
    loads.get(pool, "b")  # drops "a" from the pool, but the program still holds it
    assert loads.get(pool, "a") is held
    assert loads.count == {"a": 1, "b": 1}


def test_an_engine_loaded_again_stays_loaded() -> None:
    # tests of large programs that alternate: each load maps the package for good,
    # so the second load of a package is its last
    pool, loads = EnginePool(budget=0), Loads()
    for _ in range(4):
        for key in "abc":
            loads.get(pool, key)
    assert loads.count == {"a": 2, "b": 2, "c": 1}  # "c", the latest, was never dropped


def test_a_stand_in_engine_without_weak_references_is_kept() -> None:
    class Slotted:
        __slots__ = ()

    pool = EnginePool(budget=0)
    loads: list[int] = []

    def load() -> Slotted:
        loads.append(1)
        return Slotted()

    first = pool.get("a", CPU, MB, load)
    pool.get("b", CPU, MB, load)
    assert pool.get("a", CPU, MB, load) is first
    assert len(loads) == 2


class Wide(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x).relu()


@pytest.mark.compiles
def test_registry_keeps_no_program_weights(tmp_path: Path) -> None:
    """The decomposed program goes to the program whose request compiled it, and goes with
    it; later programs of the same package decompose on demand."""
    exported = torch.export.export(Wide(), (torch.randn(2, 64),))
    registry = ProgramRegistry(tmp_path)
    program = registry.program_for(exported, device=CPU, inductor_configs=None)
    decomposed = weakref.ref(program.decomposed)
    assert program.first_use and program.package_path.exists()
    torch.testing.assert_close(program(torch.ones(2, 64)), exported.module()(torch.ones(2, 64)))

    del program
    gc.collect()
    assert decomposed() is None
    again = registry.program_for(exported, device=CPU, inductor_configs=None)
    assert not again.first_use
    assert again.decomposed is not None  # decomposed again, on demand
    assert registry.stats.compiled == 1


def test_the_compile_s_start_and_end_are_announced_only_where_it_compiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``before_compile`` (the engine child starts importing torch) and ``after_compile``
    run once, around the one compile; a program the registry already has runs neither."""
    from pytest_aoti.compiling.program import CompiledArtifact
    from pytest_aoti.mutation_maps import read_signature

    exported = torch.export.export(Wide(), (torch.randn(2, 64),))
    registry = ProgramRegistry(tmp_path)
    said: list[str] = []

    def compiled(key, exported, configs):  # type: ignore[no-untyped-def]
        said.append("compile")
        package = tmp_path / "model.pt2"
        signature = read_signature(exported)
        return CompiledArtifact(key, package, signature, 1.0, cache_hit=False), None

    monkeypatch.setattr(registry, "_compile", compiled)
    for _ in range(2):
        registry.program_for(
            exported,
            device=CPU,
            inductor_configs=None,
            before_compile=lambda: said.append("before"),
            after_compile=lambda package: said.append(f"after {package.name}"),
        )
    assert said == ["before", "compile", "after model.pt2"]
