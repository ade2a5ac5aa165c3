"""max_extra_bytes: an in-place update must not allocate a copy of what it updates.
Measured on CUDA (faked here: this machine has no GPU); said to be unmeasured on the CPU."""

from __future__ import annotations

import types
from dataclasses import replace

import pytest
import torch

from pytest_aoti.errors import AotiCheckError
from pytest_aoti.memory.check import PeakMemory, _assert_extra_bytes
from pytest_aoti.memory.feature import MemoryOptions
from pytest_aoti.options.check_options import CheckOptions


class FakeCudaMemory:
    """torch.cuda's allocator figures, driven by the test: each call allocates ``step``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, step: int) -> None:
        self.allocated = 1000
        self.peak = self.allocated
        self.step = step
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: self.allocated)
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: self.peak)
        monkeypatch.setattr(
            torch.cuda, "reset_peak_memory_stats", lambda device=None: self._reset()
        )

    def _reset(self) -> None:
        self.peak = self.allocated

    def engine_call(self) -> None:
        self.peak = self.allocated + self.step  # a temporary of ``step`` bytes, then freed


def _limited(limit: int | None) -> CheckOptions:
    return CheckOptions().with_features({MemoryOptions: MemoryOptions(max_extra_bytes=limit)})


def _plan(limit: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(options=_limited(limit))


def _program() -> types.SimpleNamespace:
    return types.SimpleNamespace(mutated_inputs={"k_cache"})


def test_peak_of_the_calls_is_measured_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeCudaMemory(monkeypatch, step=4096)
    memory = PeakMemory(torch.device("cuda", 0))
    for step in (4096, 100):
        fake.step = step
        with memory.call():
            fake.engine_call()
    assert memory.measured and memory.peak_bytes == 4096
    _assert_extra_bytes(memory, _plan(4096), _program())  # at the limit: passes
    with pytest.raises(AotiCheckError) as excinfo:
        _assert_extra_bytes(memory, _plan(4095), _program())
    assert excinfo.value.kind == "memory"
    text = str(excinfo.value)
    assert text.startswith(
        "the engine call allocated 4,096 bytes of cuda:0 memory: more than max_extra_bytes=4,095"
    )
    assert "the program mutates 'k_cache'" in text


def test_cpu_memory_is_not_measured() -> None:
    memory = PeakMemory(torch.device("cpu"))
    with memory.call():
        torch.ones(1000)
    assert not memory.measured and memory.peak_bytes == 0
    _assert_extra_bytes(memory, _plan(0), _program())  # nothing measured, nothing to fail


@pytest.mark.compiles
def test_cpu_check_says_it_did_not_measure(run_aoti) -> None:
    result = run_aoti(
        """
        def test_bounded(aoti):
            x = example()
            result = aoti.check(DoubleThenCos(), (x,), mutates={"x": x * 2}, max_extra_bytes=0)
            assert result.extra_bytes is None

        def test_bad_limit(aoti):
            with pytest.raises(TypeError, match="max_extra_bytes must be a number of bytes"):
                aoti.check(DoubleThenCos(), (example(),), max_extra_bytes="1MB")
        """
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "aoti: max_extra_bytes was not measured in 1 check(s) on cpu: device memory is "
            "measured on CUDA only"
        ]
    )


def test_memory_check_measures_the_example_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pytest_aoti.checks.base import CheckContext, CheckPlan
    from pytest_aoti.memory.check import MemoryCheck

    fake = FakeCudaMemory(monkeypatch, step=2048)
    steps = iter([2048, 512, 4096])
    seen: list[torch.Tensor] = []

    def engine(cache: torch.Tensor) -> torch.Tensor:
        fake.step = next(steps)
        fake.engine_call()
        seen.append(cache)
        return cache

    program = types.SimpleNamespace(
        mutated_inputs={"k_cache"},
        mutated_buffers=set(),
        engine_in_exported_state=lambda: engine,
        package_bytes=4096,
    )
    example = torch.zeros(4)
    plan = CheckPlan(
        module=torch.nn.Identity(),
        input_sets=[((example,), {})],
        tolerance=None,  # no comparison here
        calls=3,
        options=_limited(4096),
    )
    check = MemoryCheck()
    cuda = torch.device("cuda", 0)
    assert check.applies(plan, CheckContext(device=cuda))
    outcome = check.run(plan, CheckContext(device=cuda, compiled=program, calls=3))
    assert outcome.figures == {"extra_bytes": 4096}  # the largest of the three calls
    assert len(seen) == 3 and all(tensor is not example for tensor in seen)  # clones

    steps = iter([4097])
    with pytest.raises(AotiCheckError, match="allocated 4,097 bytes of cuda:0 memory"):
        check.run(plan, CheckContext(device=cuda, compiled=program, calls=1))
    # the engine parity ran, where there is one: no second load of the package
    steps = iter([100])
    parity_engine_calls: list[int] = []
    loads = iter([lambda cache: parity_engine_calls.append(1) or engine(cache)])
    loaded = types.SimpleNamespace(
        mutated_inputs={"k_cache"},
        mutated_buffers=set(),
        engine_in_exported_state=lambda: next(loads),
        package_bytes=4096,
    )
    context = CheckContext(device=cuda, compiled=loaded, calls=1)
    context.fresh_engine()  # as parity takes it
    assert check.run(plan, context).figures == {"extra_bytes": 100}
    assert parity_engine_calls == [1]
    # on the CPU nothing is measured, and nothing runs
    plan = replace(plan, options=_limited(0))
    cpu = check.run(plan, CheckContext(device=torch.device("cpu"), compiled=program))
    assert cpu.figures == {"extra_bytes": None}
    assert not MemoryCheck().applies(
        CheckPlan(torch.nn.Identity(), [], None, 1, options=_limited(None)),
        CheckContext(device=torch.device("cpu")),
    )
