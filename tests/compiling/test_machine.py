"""The host's compile target, found once per machine and kept in the cache folder; no compile."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest
import torch
import torch._inductor.config as inductor_config

from pytest_aoti.cache.key import program_key
from pytest_aoti.compiling import machine
from pytest_aoti.compiling.machine import MachineTarget

TARGET = MachineTarget(
    isa="avx512",
    isa_flags="-mavx512f -mavx512dq -mavx512vl -mavx512bw -mfma",
    arch_flag="-march=native",
    march="sapphirerapids",
    features=("avx2", "avx512f", "avx512fp16", "amx-tile"),
    valid_isas=("avx512", "avx2"),
)


class Finder:
    """Stands in for the search (Inductor's ISA test builds and the compiler query),
    counting how often it runs."""

    def __init__(self, target: MachineTarget = TARGET) -> None:
        self.target = target
        self.calls = 0

    def __call__(self) -> MachineTarget:
        self.calls += 1
        return self.target


@pytest.fixture
def finder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Finder]:
    found = Finder()
    monkeypatch.setattr(machine, "find_target", found)
    machine.forget()
    yield found
    machine.forget()


def records(directory: Path) -> list[Path]:
    return sorted((directory / "machine").glob("cpu-*.json"))


def test_found_once_then_read_from_the_cache_folder(finder: Finder, tmp_path: Path) -> None:
    assert machine.machine_target(tmp_path) == TARGET
    assert finder.calls == 1
    (record,) = records(tmp_path)
    assert json.loads(record.read_text())["target"]["march"] == "sapphirerapids"

    machine.forget()  # a new process: nothing in memory, the record on disk
    assert machine.machine_target(tmp_path) == TARGET
    assert machine.machine_target(tmp_path) == TARGET
    assert finder.calls == 1


def test_a_second_cache_folder_gets_the_record_without_a_search(
    finder: Finder, tmp_path: Path
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    machine.machine_target(tmp_path / "a")
    machine.machine_target(tmp_path / "b")
    assert finder.calls == 1
    assert len(records(tmp_path / "a")) == len(records(tmp_path / "b")) == 1


@pytest.fixture
def compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A stand-in ``g++`` first on the path, the compiler Inductor is told to use."""
    path = tmp_path / "bin" / "g++"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    monkeypatch.setenv("PATH", str(path.parent), prepend=os.pathsep)
    with inductor_config.patch({"cpp.cxx": (None, "g++")}):
        yield path


@pytest.mark.parametrize("change", ["torch", "compiler", "cpu", "settings"])
def test_found_again_when_what_it_depends_on_changes(
    finder: Finder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiler: Path, change: str
) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: sse2 avx2\n\n")
    monkeypatch.setattr(machine, "cpu_description", partial(machine.cpu_description, cpuinfo))
    cache = tmp_path / "cache"
    cache.mkdir()
    machine.machine_target(cache)
    before = machine.machine_identity()
    assert str(compiler.resolve()) in before["compiler"]

    if change == "torch":
        monkeypatch.setattr(torch, "__version__", "9.9.9")
    elif change == "compiler":  # an upgraded compiler is another file
        compiler.write_text("#!/bin/sh\n# version 13\n")
    elif change == "cpu":
        cpuinfo.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: sse2 avx2 avx512f\n")
    else:
        monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    machine.forget()
    machine.machine_target(cache)

    assert machine.machine_identity() != before
    assert finder.calls == 2
    assert len(records(cache)) == 2  # one per identity: venvs sharing a cache do not fight


@pytest.mark.parametrize(
    "damage",
    ["junk", "truncated", "wrong types", "other identity", "empty", "folder", "fifo", "huge"],
)
def test_a_damaged_record_is_found_again_and_replaced(
    finder: Finder, tmp_path: Path, damage: str
) -> None:
    machine.machine_target(tmp_path)
    (record,) = records(tmp_path)
    data = json.loads(record.read_text())
    record.unlink()
    if damage == "junk":
        record.write_bytes(b"\x00\xff not json")
    elif damage == "truncated":
        record.write_text(json.dumps(data)[:40])
    elif damage == "wrong types":
        data["target"]["features"] = "avx2"
        record.write_text(json.dumps(data))
    elif damage == "other identity":
        data["identity"]["torch"] = "0.0.1"
        record.write_text(json.dumps(data))
    elif damage == "empty":
        record.touch()
    elif damage == "folder":
        record.mkdir()
    elif damage == "fifo":
        os.mkfifo(record)
    else:
        record.write_text(json.dumps(data) + " " * (1 << 20))

    machine.forget()
    started = time.monotonic()
    assert machine.machine_target(tmp_path) == TARGET
    assert time.monotonic() - started < 10  # a FIFO is never waited on
    assert finder.calls == 2
    if damage != "folder":  # a folder is not ours to remove: found again each process
        machine.forget()
        machine.machine_target(tmp_path)
        assert finder.calls == 2
        assert json.loads(record.read_text())["target"]["march"] == "sapphirerapids"


def test_a_cache_folder_that_cannot_keep_the_record_still_gives_the_target(
    finder: Finder, tmp_path: Path
) -> None:
    (tmp_path / "machine").write_text("a file where the record folder should be")
    assert machine.machine_target(tmp_path) == TARGET
    machine.forget()
    assert machine.machine_target(tmp_path) == TARGET
    assert finder.calls == 2  # searched again, nothing raised


def test_a_record_that_cannot_be_written_costs_one_search(
    finder: Finder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(machine, "write_record", refuse)
    assert machine.machine_target(tmp_path) == TARGET
    assert finder.calls == 1  # the search's answer is used, not searched for again
    assert records(tmp_path) == []


def test_a_read_only_cache_is_read_and_never_written(finder: Finder, tmp_path: Path) -> None:
    assert machine.machine_target(tmp_path, write=False) == TARGET
    assert list(tmp_path.iterdir()) == []

    machine.forget()
    machine.machine_target(tmp_path)  # a writable run keeps it
    machine.forget()
    assert machine.machine_target(tmp_path, write=False) == TARGET
    assert finder.calls == 2  # the second read-only run read the record


# One process of the race: a fixed identity and a slow stand-in search that leaves a mark,
# so the test counts searches across processes; imports no torch.
RACER = """
import os, sys, time
from pathlib import Path
from pytest_aoti.compiling import machine

directory, marks = Path(sys.argv[1]), Path(sys.argv[2])
target = machine.MachineTarget("avx2", "-mavx2 -mfma", "-march=native", "haswell", ("avx2",), ("avx2",))


def slow_search():
    (marks / str(os.getpid())).touch()
    time.sleep(0.5)  # long enough for every process to reach the lock meanwhile
    return target


machine.machine_identity = lambda: {"format": machine.RECORD_FORMAT, "cpu": "racing"}
machine.find_target = slow_search
assert machine.machine_target(directory) == target
"""


def test_concurrent_processes_search_once(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    racers = [
        subprocess.Popen([sys.executable, "-c", RACER, str(tmp_path), str(marks)]) for _ in range(4)
    ]
    assert [racer.wait(timeout=120) for racer in racers] == [0, 0, 0, 0]
    assert len(list(marks.iterdir())) == 1
    assert len(records(tmp_path)) == 1
    assert not list((tmp_path / "machine").glob(".cpu-*"))  # no temporary file left


GCC_LISTING = """\
Using built-in specs.
COLLECT_GCC=g++
Target: x86_64-linux-gnu
 /usr/lib/gcc/x86_64-linux-gnu/12/cc1plus -E -quiet - "-march=rocketlake" -mmmx -mno-sse4a \
-mavx512f -mno-avx512er -mamx-tile --param "l1-cache-size=48" "-mtune=rocketlake" -dumpbase -
"""
CLANG_LISTING = """\
clang version 17.0.6
 "/usr/lib/llvm-17/bin/clang" "-cc1" "-triple" "x86_64-pc-linux-gnu" "-E" \
"-target-cpu" "znver4" "-target-feature" "+avx512f" "-target-feature" "-sse4a" \
"-target-feature" "+avx2" "-tune-cpu" "generic" "-x" "c++" "-"
"""


def test_the_driver_listing_gives_the_resolved_march_and_enabled_features() -> None:
    assert machine.parse_driver_listing(GCC_LISTING) == (
        "rocketlake",
        ("amx-tile", "avx512f", "mmx"),
    )
    assert machine.parse_driver_listing(CLANG_LISTING) == ("znver4", ("avx2", "avx512f"))
    assert machine.parse_driver_listing("no compiler here") == ("", ())


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_native_resolves_to_a_named_cpu_with_its_features() -> None:
    march, features = machine.resolve_arch("g++", ["-march=native"])
    assert march and march != "native"
    if os.uname().machine == "x86_64":
        assert "sse2" in features


def test_a_package_for_another_cpu_of_the_same_isa_is_another_key(
    finder: Finder, tmp_path: Path
) -> None:
    exported = torch.export.export(torch.nn.Linear(2, 2), (torch.ones(1, 2),))

    def key() -> str:
        machine.forget()
        return program_key(
            exported, device=torch.device("cpu"), inductor_configs={}, machine_dir=tmp_path
        ).parts["device"]

    here = key()
    assert key() == here  # read back from the record: the same key
    # a newer CPU of the same class: same ISA and flags, one feature more
    finder.target = replace(TARGET, features=(*TARGET.features, "avx10"))
    shutil.rmtree(tmp_path / "machine")
    assert key() != here


def test_an_inductor_without_a_setting_still_has_an_identity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """torch 2.11's Inductor has no ``cpp.march``: the identity reads what this torch has."""
    import types

    present = machine.machine_identity()["settings"]
    older = types.SimpleNamespace(cxx=inductor_config.cpp.cxx, simdlen=None, vec_isa_ok=None)
    # the config module refuses a new `cpp`: stand a namespace in for the whole module
    monkeypatch.setattr(torch._inductor, "config", types.SimpleNamespace(cpp=older))
    monkeypatch.setitem(sys.modules, "torch._inductor.config", torch._inductor.config)
    settings = machine.machine_identity()["settings"]
    assert settings.endswith("march=None simdlen=None vec_isa_ok=None")
    assert "march=" in present
