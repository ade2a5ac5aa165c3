"""The objects alive before a compile are frozen for it (its full collections walk only what
it makes) and thawed after, whatever way it ends. No compile: a stand-in takes its place."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest
import torch
import torch._inductor

from pytest_aoti.compiling.pipeline import compile_package, decompose, export_module
from pytest_aoti.errors import AotiCompileError


@pytest.fixture(scope="module")
def decomposed() -> Any:
    exported = export_module(torch.nn.Linear(3, 2), (torch.randn(4, 3),), {})
    return decompose(exported)


class Finalized:
    """A reference cycle that says when the collector freed it."""

    freed: list[bool] = []

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        Finalized.freed.append(True)


def stand_in(seen: dict[str, bool], error: Exception | None = None) -> Any:
    def compile_and_package(program: Any, package_path: str, **_: Any) -> str:
        seen["frozen"] = gc.get_freeze_count() > 0
        seen["young garbage freed"] = bool(Finalized.freed)
        if error is not None:
            raise error
        Path(package_path).write_bytes(b"stand-in")
        return package_path

    return compile_and_package


def test_the_compile_runs_frozen_and_the_objects_thaw_after(
    decomposed: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, bool] = {}
    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", stand_in(seen))
    Finalized.freed.clear()
    Finalized()  # garbage in a cycle, young: collected before the freeze, not kept by it
    compile_package(decomposed, tmp_path / "p.pt2", None)
    assert seen == {"frozen": True, "young garbage freed": True}
    assert gc.get_freeze_count() == 0


def test_a_failed_compile_thaws_them_too(
    decomposed: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, bool] = {}
    failing = stand_in(seen, RuntimeError("inductor failed"))
    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", failing)
    with pytest.raises(AotiCompileError):
        compile_package(decomposed, tmp_path / "p.pt2", None)
    assert seen["frozen"]
    assert gc.get_freeze_count() == 0


def test_a_freeze_of_the_callers_is_left_to_them(
    decomposed: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, bool] = {}
    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", stand_in(seen))
    gc.freeze()
    try:
        frozen_before = gc.get_freeze_count()
        compile_package(decomposed, tmp_path / "p.pt2", None)
        assert gc.get_freeze_count() >= frozen_before  # not thawed by the compile
    finally:
        gc.unfreeze()
