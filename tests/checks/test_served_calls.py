"""Engine calls answered from the engine child's outputs: what the child made is served as the
engine would return it (inputs written in place, an output that is an input shared with the
caller); anything else goes to an engine loaded here, on first need."""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch

from pytest_aoti.checks.served_calls import ServedCalls, ServedEngine, call_key
from pytest_aoti.isolation.child import _clean_deleted_mappings


class Accumulate(torch.nn.Module):
    def forward(self, x: torch.Tensor, cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cache.add_(x)
        return x * 2, cache


@pytest.fixture(scope="module")
def program() -> Any:
    x, cache = torch.ones(3), torch.zeros(3)
    exported = torch.export.export(Accumulate(), (x, cache)).run_decompositions()
    return types.SimpleNamespace(exported=exported)


def _child_call(x: torch.Tensor, cache: torch.Tensor) -> dict[str, Any]:
    """One call as the child keeps it: outputs, which are inputs, the inputs after it."""
    after = cache + x
    return {"outputs": (x * 2, after), "aliases": [-1, 1], "inputs": [x.clone(), after]}


def test_a_call_the_child_made_is_served_as_the_engine_returns_it(program: Any) -> None:
    served = ServedCalls()
    x, cache = torch.tensor([1.0, 2.0, 3.0]), torch.zeros(3)
    first = _child_call(x, cache)
    served.keep([x, cache], [first, _child_call(x, first["inputs"][1])])
    loads: list[int] = []
    engine = ServedEngine(program, served, lambda: loads.append(1))

    mine_x, mine_cache = x.clone(), cache.clone()
    doubled, returned = engine(mine_x, mine_cache)
    assert doubled.tolist() == [2.0, 4.0, 6.0]
    assert mine_cache.tolist() == [1.0, 2.0, 3.0]  # written in place, as the engine does
    assert returned.data_ptr() == mine_cache.data_ptr()  # the output that is the input
    engine(mine_x, mine_cache)  # the second call starts where the first left the inputs
    assert mine_cache.tolist() == [2.0, 4.0, 6.0]
    assert served.served == 2 and loads == []  # no engine loaded here


def test_a_call_the_child_did_not_make_loads_the_engine_here_once(program: Any) -> None:
    served = ServedCalls()
    x, cache = torch.ones(3), torch.zeros(3)
    served.keep([x, cache], [_child_call(x, cache)])
    calls: list[tuple[Any, ...]] = []

    def load() -> Any:
        calls.append(("load",))
        return lambda *args: calls.append(args) or "here"

    engine = ServedEngine(program, served, load)
    assert engine(torch.full((3,), 5.0), torch.zeros(3)) == "here"  # other values
    assert engine(torch.ones(3), torch.zeros(3)) != "here"  # the child's call
    assert engine(torch.ones(3), torch.ones(3)) == "here"
    assert [call for call in calls if call == ("load",)] == [("load",)]  # loaded once
    assert (served.served, served.made_here) == (1, 2)


@pytest.mark.parametrize(
    "tensor",
    [
        torch.tensor(2.5),  # 0-dim
        torch.ones(0, 3),  # empty
        torch.arange(12.0).reshape(3, 4)[:, 1],  # strided view
        torch.ones(4, dtype=torch.bfloat16),
        torch.tensor([True, False]),
        torch.ones(2, dtype=torch.complex64),
        torch.arange(6).reshape(2, 3).t(),  # transposed
    ],
    ids=["0-dim", "empty", "strided", "bfloat16", "bool", "complex", "transposed"],
)
def test_the_key_reads_every_input_form_and_every_element(tensor: torch.Tensor) -> None:
    same = tensor.clone()
    assert call_key([same]) == call_key([same.clone()])
    if tensor.numel():
        changed = tensor.clone()
        last = (-1,) * changed.dim()
        changed[last] = ~changed[last] if changed.dtype == torch.bool else changed[last] + 1
        assert call_key([changed]) != call_key([same])


def test_the_key_tells_shared_storage_from_equal_copies() -> None:
    base = torch.arange(4.0)
    shared = [base, base]
    distinct = [base, base.clone()]
    assert call_key(shared) != call_key(distinct)
    last = torch.zeros(1000)
    last_changed = last.clone()
    last_changed[-1] = 1.0  # past the first bytes: the whole tensor counts
    assert call_key([last]) != call_key([last_changed])


def test_seconds_timed_in_the_child_are_its_median() -> None:
    served = ServedCalls()
    x = torch.ones(2)
    assert served.seconds([x]) is None
    served.keep_seconds([x], [0.3, 0.1, 0.2])
    assert served.seconds([x.clone()]) == 0.2


_SMAPS = """\
7f0000000000-7f0000001000 r--p 00000000 fe:00 11 /tmp/aotinductor_a/m/x.wrapper.so (deleted)
Size:                  4 kB
Anonymous:             0 kB
7f0000001000-7f0000002000 r--p 00001000 fe:00 11 /tmp/aotinductor_a/m/x.wrapper.so (deleted)
Size:                  4 kB
Anonymous:             4 kB
7f0000002000-7f0000003000 r-xp 00002000 fe:00 11 /tmp/aotinductor_a/m/x.wrapper.so (deleted)
Anonymous:             0 kB
7f0000003000-7f0000004000 r--p 00003000 fe:00 12 /tmp/aotinductor_b/m/x.wrapper.so
Anonymous:             0 kB
7f0000004000-7f0000005000 r--p 00000000 fe:00 13 /usr/lib/libc.so.6 (deleted)
Anonymous:             0 kB
"""


def test_only_untouched_read_only_pages_of_unloaded_engines_are_given_back() -> None:
    # a relocated page (anonymous), code, a live engine's library, another library: kept
    assert _clean_deleted_mappings(_SMAPS) == [(0x7F0000000000, 0x7F0000001000)]


def test_an_expanded_input_is_written_only_where_the_engine_wrote(program: Any) -> None:
    served = ServedCalls()
    expanded, cache = torch.ones(1).expand(3), torch.zeros(3)  # x is read only
    after = cache + 1
    call = {"outputs": (expanded * 2, after), "aliases": [-1, 1], "inputs": [expanded, after]}
    served.keep([expanded, cache], [call])
    engine = ServedEngine(program, served, lambda: None)
    mine = torch.zeros(3)
    doubled, _ = engine(torch.ones(1).expand(3), mine)
    assert doubled.tolist() == [2.0, 2.0, 2.0] and mine.tolist() == [1.0, 1.0, 1.0]
    assert served.made_here == 0


def test_the_child_s_answers_go_back_to_the_engine_s_device() -> None:
    # the child's results come back on the CPU; a CUDA engine's outputs are on its device
    served = ServedCalls(torch.device("meta"))
    x = torch.ones(2)
    served.keep([x], [{"outputs": (x * 2,), "aliases": [-1], "inputs": [x.clone()]}])
    (kept,) = served._calls.values()
    assert kept["outputs"][0].device.type == "meta"
    assert kept["inputs"][0].device.type == "cpu"  # where the caller's inputs are


def test_a_write_into_an_expanded_input_is_made_here_and_counted_once(program: Any) -> None:
    served = ServedCalls()
    x, cache = torch.ones(3), torch.zeros(1).expand(3)  # the engine writes the cache
    call = {"outputs": (x * 2, x), "aliases": [-1, 1], "inputs": [x, torch.ones(3)]}
    served.keep([x, cache], [call])
    engine = ServedEngine(program, served, lambda: lambda *args: "here")
    assert engine(torch.ones(3), torch.zeros(1).expand(3)) == "here"
    assert (served.served, served.made_here) == (0, 1)
