"""The content key's ingredients, without compiling."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
import torch._inductor.config as inductor_config
from torch.export import Dim

from pytest_aoti.cache.key import _canonical_symbols, program_key
from pytest_aoti.compiling import machine
from pytest_aoti.compiling.program import ProgramKey


class Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x).relu()


@pytest.fixture(scope="module")
def exported() -> torch.export.ExportedProgram:
    torch.manual_seed(0)
    return torch.export.export(
        Linear(), (torch.ones(4, 3),), dynamic_shapes=({0: Dim("b", min=2)},)
    )


def key_of(program: torch.export.ExportedProgram, **configs: object) -> str:
    return program_key(program, device=torch.device("cpu"), inductor_configs=configs).digest


def test_symbols_are_renamed_by_first_appearance() -> None:
    assert _canonical_symbols("s77 s3 s77 u0 sum_1 s3") == _canonical_symbols(
        "s0 s9 s0 u4 sum_1 s9"
    )
    assert _canonical_symbols("s1 s2") != _canonical_symbols("s1 s1")


def test_key_is_stable_for_the_same_program(exported: torch.export.ExportedProgram) -> None:
    torch.manual_seed(0)
    again = torch.export.export(
        Linear(), (torch.ones(4, 3),), dynamic_shapes=({0: Dim("b", min=2)},)
    )
    assert key_of(exported) == key_of(again)


def test_one_weight_value_changes_the_key(exported: torch.export.ExportedProgram) -> None:
    torch.manual_seed(0)
    module = Linear()
    with torch.no_grad():
        module.layer.bias[1] += 1e-6
    changed = torch.export.export(
        module, (torch.ones(4, 3),), dynamic_shapes=({0: Dim("b", min=2)},)
    )
    assert (
        program_key(changed, device=torch.device("cpu"), inductor_configs={}).parts["graph"]
        == (program_key(exported, device=torch.device("cpu"), inductor_configs={}).parts["graph"])
    )
    assert key_of(changed) != key_of(exported)


def test_configs_global_and_per_call_change_the_key(exported: torch.export.ExportedProgram) -> None:
    base = key_of(exported)
    assert key_of(exported, max_autotune=True) != base
    with inductor_config.patch({"cpp.simdlen": 8}):
        assert key_of(exported) != base
    assert key_of(exported) == base


def test_options_torch_writes_while_compiling_do_not_change_the_key(
    exported: torch.export.ExportedProgram,
) -> None:
    base = key_of(exported)
    with inductor_config.patch({"aot_inductor.metadata": {"AOTI_DEVICE_KEY": "cpu"}}):
        assert key_of(exported) == base


def test_custom_pass_without_uuid_is_not_persistable(
    exported: torch.export.ExportedProgram,
) -> None:
    def my_pass(graph: object) -> None:
        return None

    key = program_key(
        exported,
        device=torch.device("cpu"),
        inductor_configs={"post_grad_custom_post_pass": my_pass},
    )
    assert not key.persistable
    assert program_key(exported, device=torch.device("cpu"), inductor_configs={}).persistable


def test_cpu_vector_isa_is_part_of_the_key(
    exported: torch.export.ExportedProgram, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    avx2 = key_of(exported)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert key_of(exported) != avx2


class FakeGpus:
    """Fakes what a CUDA content key reads, on any machine: one capability per device
    index. Nothing touches a real GPU, so this runs on a CPU-only torch too."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.capabilities: dict[int, tuple[int, int]] = {0: (8, 0)}
        self.current = 0
        self.asked: list[int] = []
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: len(self.capabilities))
        monkeypatch.setattr(torch.cuda, "current_device", lambda: self.current)
        monkeypatch.setattr(torch.cuda, "get_device_capability", self.capability)
        monkeypatch.setattr(torch.cuda, "get_device_properties", self.properties)
        monkeypatch.setattr(torch.version, "cuda", "12.8")

    def index(self, device: int | str | torch.device | None = None) -> int:
        if device is None:
            return self.current
        if isinstance(device, int):
            return device
        index = torch.device(device).index
        return self.current if index is None else index

    def capability(self, device: int | str | torch.device | None = None) -> tuple[int, int]:
        index = self.index(device)
        self.asked.append(index)
        return self.capabilities[index]

    def properties(self, device: int | str | torch.device | None = None) -> object:
        major, minor = self.capabilities[self.index(device)]
        return SimpleNamespace(
            name=f"Fake GPU sm_{major}{minor}", major=major, minor=minor, total_memory=2**34
        )


@pytest.fixture
def fake_gpus(monkeypatch: pytest.MonkeyPatch) -> FakeGpus:
    return FakeGpus(monkeypatch)


def cuda_key(program: torch.export.ExportedProgram, device: str = "cuda") -> ProgramKey:
    return program_key(program, device=torch.device(device), inductor_configs={})


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_host_compile_target_is_part_of_the_key(
    exported: torch.export.ExportedProgram,
    fake_gpus: FakeGpus,
    monkeypatch: pytest.MonkeyPatch,
    device: str,
) -> None:
    # CPU kernels and a CUDA package's host wrapper are both built with -march=native:
    # a host of the same ISA class with one instruction set more must not share a package
    here = cuda_key(exported, device)
    target = machine.machine_target(None)
    newer = replace(target, features=(*target.features, "avx10.2"))
    monkeypatch.setattr(machine, "machine_target", lambda directory, write=True: newer)
    elsewhere = cuda_key(exported, device)
    assert {name for name in here.parts if here.parts[name] != elsewhere.parts[name]} == {"device"}


def test_gpus_of_another_capability_never_share_a_key(
    exported: torch.export.ExportedProgram, fake_gpus: FakeGpus
) -> None:
    fake_gpus.capabilities = {0: (8, 0)}
    ampere = cuda_key(exported)
    assert cuda_key(exported) == ampere  # same capability, same key

    fake_gpus.capabilities = {0: (9, 0)}
    hopper = cuda_key(exported)
    assert hopper.digest != ampere.digest
    assert {name for name in hopper.parts if hopper.parts[name] != ampere.parts[name]} == {"device"}
    assert cuda_key(exported, "cuda:0") == hopper  # "cuda" is the current device, cuda:0
    assert hopper.digest != key_of(exported)  # nor with the CPU


def test_each_gpu_is_keyed_by_its_own_capability(
    exported: torch.export.ExportedProgram, fake_gpus: FakeGpus
) -> None:
    # one machine, two kinds of GPU: a program compiled for cuda:1 is not one for cuda:0
    fake_gpus.capabilities = {0: (8, 0), 1: (9, 0)}
    first, second = cuda_key(exported, "cuda:0"), cuda_key(exported, "cuda:1")
    assert fake_gpus.asked == [0, 1]
    assert first.digest != second.digest
    fake_gpus.current = 1
    assert cuda_key(exported) == second  # "cuda" follows torch.cuda.current_device()


def test_weight_digests_taken_during_the_export_give_the_same_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The key's digests of the module's weights, read in a thread while it exports, are those
    the export's state holds (none read again), and give the key read at the key."""
    from pytest_aoti.cache import weight_digests

    torch.manual_seed(0)
    module = Linear()
    digests = weight_digests.WeightDigests((*module.parameters(), *module.buffers()))
    program = torch.export.export(module, (torch.ones(4, 3),))
    read_again: list[tuple[int, ...]] = []
    reading = weight_digests.tensor_digest

    def counted(tensor: torch.Tensor) -> str:
        read_again.append(tuple(tensor.shape))
        return reading(tensor)

    monkeypatch.setattr(weight_digests, "tensor_digest", counted)
    during = program_key(
        program, device=torch.device("cpu"), inductor_configs={}, weight_digests=digests
    )
    assert read_again == []
    assert during.digest == key_of(program)


def test_a_weight_written_after_its_digest_is_read_again() -> None:
    """A weight written in place after the thread read it (its version moved) is digested
    anew: the key holds the value the program was exported with."""
    from pytest_aoti.cache.weight_digests import WeightDigests

    torch.manual_seed(0)
    module = Linear()
    digests = WeightDigests((*module.parameters(), *module.buffers()))
    digests.digest(module.layer.bias)  # the thread has read every weight
    before = key_of(torch.export.export(module, (torch.ones(4, 3),)))
    with torch.no_grad():
        module.layer.bias.add_(1.0)
    program = torch.export.export(module, (torch.ones(4, 3),))
    after = program_key(
        program, device=torch.device("cpu"), inductor_configs={}, weight_digests=digests
    )
    assert after.digest == key_of(program) != before
