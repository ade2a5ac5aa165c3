"""The session's parts outside pytest's hooks, without compiling: the stores' lifecycle
(:class:`~pytest_aoti.cache.run_stores.RunStores`) and where a test's files go
(:class:`~pytest_aoti.reports.artifacts.ArtifactPaths`)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_aoti.cache.run_stores import RunStores
from pytest_aoti.options.settings import AotiSettings
from pytest_aoti.reports.artifacts import ArtifactPaths
from pytest_aoti.reports.collector import ReportCollector


class _Cache:
    """pytest's cache provider, recording which folders were made."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.made: list[str] = []

    def mkdir(self, name: str) -> Path:
        self.made.append(name)
        path = self.root / "d" / name
        path.mkdir(parents=True, exist_ok=True)
        return path


def _stores(tmp_path: Path, settings: AotiSettings, **config: Any) -> tuple[RunStores, Any]:
    collector = ReportCollector()
    fake = SimpleNamespace(rootpath=tmp_path, **config)
    stores = RunStores(
        fake,  # type: ignore[arg-type]
        settings,
        on_problem=collector.cache_problem,
        problems=collector.cache_problems,
        watcher=lambda: pytest.fail("no compile was asked for"),
        on_ready=lambda program: None,
    )
    return stores, fake


def test_the_header_makes_no_cache_folder(tmp_path: Path) -> None:
    cache = _Cache(tmp_path / ".pytest_cache")
    stores, _ = _stores(tmp_path, AotiSettings(), cache=cache)
    assert stores.cache_state() == "readwrite at .pytest_cache/d/aoti"
    stores.evict(workers_used_programs=False)  # a run that used no program evicts nothing
    stores.close()
    assert cache.made == []
    assert stores.stats is None


def test_the_default_store_is_private_and_reported_where_it_is(tmp_path: Path) -> None:
    cache = _Cache(tmp_path / ".pytest_cache")
    stores, _ = _stores(tmp_path, AotiSettings(), cache=cache)
    store = stores.store
    assert store is not None and store.writable
    root = tmp_path / ".pytest_cache" / "d" / "aoti"
    assert (root.stat().st_mode & 0o777) == 0o700
    assert stores.cache_state() == f"readwrite at {root}"


def test_without_a_cache_provider_the_cache_is_off(tmp_path: Path) -> None:
    stores, _ = _stores(tmp_path, AotiSettings(), cache=None)
    assert stores.store is None
    assert stores.cache_state().startswith("off (pytest's cache provider is disabled")
    assert stores.hypothesis_database() is None


def test_an_unusable_cache_dir_is_a_usage_error_with_the_reason(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    stores, _ = _stores(tmp_path, AotiSettings(cache_dir=blocker / "aoti"), cache=None)
    with pytest.raises(pytest.UsageError) as raised:
        stores.check_cache_dir()
    message = str(raised.value)
    assert message.startswith(f"--aoti-cache-dir={blocker / 'aoti'}: ")
    assert message.endswith("; pass a directory you can write to (or --aoti-cache=off)")
    assert stores.cache_state().startswith("off (")


def test_an_xdist_worker_leaves_the_cache_dir_to_the_controller(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    settings = AotiSettings(cache_dir=blocker / "aoti")
    stores, _ = _stores(tmp_path, settings, cache=None, workerinput={"workerid": "gw0"})
    stores.check_cache_dir()  # the controller said it already


def test_bundles_and_traces_are_numbered_per_test(tmp_path: Path) -> None:
    paths = ArtifactPaths(tmp_path / "failed", tmp_path / "traces")
    test = "tests/test_model.py::test_it[cpu]"
    first, second = paths.bundle_dir(test), paths.bundle_dir(test)
    assert first is not None and second is not None
    assert first.parent == tmp_path / "failed" and second.name == f"{first.name}-2"
    other = paths.bundle_dir("tests/test_model.py::test_other[cpu]")
    assert other is not None and other.name != first.name
    trace, again = paths.profile_path(test), paths.profile_path(test)
    assert trace is not None and again is not None
    assert trace.name == f"{first.name}.json" and again.name == f"{first.name}-2.json"
    off = ArtifactPaths(None, None)
    assert off.bundle_dir(test) is None and off.profile_path(test) is None


def test_plugin_figures_list_this_process_before_the_workers() -> None:
    collector = ReportCollector()
    collector.worker_figures.append({"remote": {"hits": 1}})
    assert collector.figures({"remote": {"hits": 2}}) == [
        {"remote": {"hits": 2}},
        {"remote": {"hits": 1}},
    ]
    assert collector.figures({}) == [{"remote": {"hits": 1}}]
