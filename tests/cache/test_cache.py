"""The compile-once artifact cache end to end: real pytest sessions on a cache directory.

Every scenario runs inner pytest sessions (in-process with pytester, or in subprocesses)
on its own cache directory, since most of them damage entries.

One AOTI compile costs several seconds here, so exactly one session compiles for real: the
"golden" run, which fills a cache directory once per module. Every scenario starts from a
copy of that directory (or from an empty one), and its inner sessions replace the torch
compile step, and only that step, by a copy of the golden package through a conftest
(``FAKE_COMPILE``). The registry, the store, publishing, verification, locking, loading
the engine and checking it against eager all run for real; "N compiled" in the summary
line still counts the registry's compiles.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_aoti.cache.store import FORMAT_VERSION, ArtifactStore

FOREIGN_UID = 12345
WARN_ALWAYS = "always::pytest_aoti.AotiCacheWarning"

needs_root = pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="os.chown to another uid needs root"
)

# One program for every scenario: a weight (the key hashes it), an input mutation (its
# signature must survive the cache's metadata) and an output checked against eager.
MODEL = textwrap.dedent(
    """
    import torch


    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.tensor([[1.0, -2.0], [0.5, 3.0]]))

        def forward(self, x):
            x.mul_(2)
            return torch.cos(x @ self.weight)


    def example():
        return torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])


    def check(aoti):
        program = aoti.compile(Model(), (example(),))
        assert program.mutated_inputs == {"x"}
        aoti.check(Model(), (example(),), mutates={"x": example() * 2})
        return program
    """
)

ONE_TEST = MODEL + textwrap.dedent(
    """
    def test_model(aoti):
        check(aoti)
    """
)

# Two tests of the same program, each waiting for the other process before it asks for
# the program, so that both processes reach the store at the same moment.
RACE_TESTS = textwrap.dedent(
    """
    import os
    import time
    from pathlib import Path

    BARRIER = Path({barrier!r})


    def meet_the_other_process():
        BARRIER.mkdir(exist_ok=True)
        (BARRIER / str(os.getpid())).touch()
        deadline = time.monotonic() + 60
        while len(list(BARRIER.iterdir())) < 2:
            assert time.monotonic() < deadline, "the other process never came"
            time.sleep(0.02)


    def test_first(aoti):
        meet_the_other_process()
        check(aoti)


    def test_second(aoti):
        meet_the_other_process()
        check(aoti)
    """
)

# Stands in for the torch compile in every session but the golden one: copies the golden
# package (after a pause, so that racing processes overlap), refusing any other program.
FAKE_COMPILE = textwrap.dedent(
    """
    import shutil
    import time
    from pathlib import Path

    import pytest
    import pytest_aoti.cache.registry

    GOLDEN_PACKAGE = Path({package!r})
    GOLDEN_KEY = {key!r}
    DELAY = {delay!r}
    _copyfile = shutil.copyfile


    @pytest.fixture(autouse=True)
    def _compile_by_copying_the_golden_package(monkeypatch):
        def compile_package(decomposed, package_path, inductor_configs):
            assert package_path.stem == GOLDEN_KEY, f"not the golden program: {{package_path}}"
            time.sleep(DELAY)
            _copyfile(GOLDEN_PACKAGE, package_path)
            return package_path

        monkeypatch.setattr(pytest_aoti.cache.registry, "compile_package", compile_package)
    """
)

# The disk fills up half-way through copying the package into the store's staging area.
FAILING_PUBLISH = textwrap.dedent(
    """

    import errno
    import os


    @pytest.fixture(autouse=True)
    def _disk_full_while_staging(monkeypatch):
        def copyfile(src, dst, *args, **kwargs):
            if not Path(dst).parent.name.endswith(".new"):
                return _copyfile(src, dst, *args, **kwargs)
            data = Path(src).read_bytes()
            Path(dst).write_bytes(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))

        def link(src, dst, *args, **kwargs):  # another filesystem: the store copies
            raise OSError(errno.EXDEV, "Invalid cross-device link", str(dst))

        monkeypatch.setattr(shutil, "copyfile", copyfile)
        monkeypatch.setattr(os, "link", link)
    """
)

_SUMMARY = re.compile(
    r"^aoti: (\d+) programs?; (\d+) compiled in [\d.]+ s; (\d+) loaded from cache(?: in [\d.]+ m?s)?$",
    re.MULTILINE,
)


@dataclass(frozen=True)
class Golden:
    cache: Path
    """A cache directory holding the one real compile; copy it, never change it."""
    key: str
    package: Path
    """A copy of the compiled package, outside any cache."""
    first_run: pytest.RunResult
    first_run_junit: Path


@pytest.fixture(scope="module")
def _golden_memo() -> dict[str, Golden | str]:
    return {}


@pytest.fixture
def golden(
    pytester: pytest.Pytester,
    tmp_path_factory: pytest.TempPathFactory,
    _golden_memo: dict[str, Golden | str],
) -> Golden:
    """The golden cache, filled with a real compile by the first test that asks (in its
    pytester directory: pytester is function-scoped)."""
    if "golden" not in _golden_memo:
        _golden_memo["golden"] = "the golden run failed in an earlier test"  # tried once only
        base = tmp_path_factory.mktemp("golden")
        cache, junit = base / "cache", base / "junit.xml"
        pytester.makepyfile(test_model=ONE_TEST)
        result = run_inner(pytester, cache, f"--junitxml={junit}")
        result.assert_outcomes(passed=1, warnings=0)
        (entry,) = entries(cache)
        package = base / "package.pt2"
        shutil.copyfile(entry / "package.pt2", package)
        _golden_memo["golden"] = Golden(cache, entry.name, package, result, junit)
    found = _golden_memo["golden"]
    if isinstance(found, str):
        pytest.fail(found)
    return found


@pytest.fixture
def scenario(pytester: pytest.Pytester, golden: Golden) -> pytest.Pytester:
    """A pytester directory with the model test and the golden-copying compile step."""
    pytester.makepyfile(test_model=ONE_TEST)
    fake_compile(pytester, golden, delay=0.0)
    return pytester


def fake_compile(pytester: pytest.Pytester, golden: Golden, delay: float, extra: str = "") -> None:
    pytester.makeconftest(
        FAKE_COMPILE.format(package=str(golden.package), key=golden.key, delay=delay) + extra
    )


def copy_of(golden: Golden, tmp_path: Path, name: str = "cache") -> Path:
    return Path(shutil.copytree(golden.cache, tmp_path / name, symlinks=True))


def run_inner(pytester: pytest.Pytester, cache: Path, *args: str) -> pytest.RunResult:
    """One in-process pytest session on ``cache``; every cache warning is shown."""
    return pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--aoti-device=cpu",
        f"--aoti-cache-dir={cache}",
        "-W",
        WARN_ALWAYS,
        *args,
    )


def summary(text: str) -> tuple[int, int, int]:
    """(programs, compiled, loaded) of the one aoti summary line in ``text``."""
    found = _SUMMARY.findall(text)
    assert len(found) == 1, f"expected one aoti summary line in:\n{text}"
    programs, compiled, loaded = found[0]
    return int(programs), int(compiled), int(loaded)


def entries(cache: Path) -> list[Path]:
    directory = cache / f"v{FORMAT_VERSION}" / "entries"
    return sorted(directory.iterdir()) if directory.is_dir() else []


def meta_of(entry: Path) -> dict[str, Any]:
    return json.loads((entry / "meta.json").read_text())


def assert_good_entry(entry: Path, golden: Golden) -> None:
    meta = meta_of(entry)
    package = (entry / "package.pt2").read_bytes()
    assert meta["format_version"] == FORMAT_VERSION
    assert meta["key"] == entry.name == golden.key
    assert meta["size"] == len(package) == golden.package.stat().st_size
    assert meta["sha256"] == hashlib.sha256(package).hexdigest()
    assert package == golden.package.read_bytes()


def assert_recompiled_after_one_warning(result: pytest.RunResult, *warning_lines: str) -> None:
    """The test passed, with the cache problem reported in the summary (``warning_lines``
    match it) and no warning, after compiling again."""
    result.assert_outcomes(passed=1, warnings=0)
    result.stdout.fnmatch_lines(
        [*warning_lines, "aoti: 1 program; 1 compiled in *; 0 loaded from cache in *"]
    )


def assert_one_good_entry(cache: Path, golden: Golden) -> None:
    """The cache holds exactly one entry: the golden package, intact."""
    (entry,) = entries(cache)
    assert_good_entry(entry, golden)


def snapshot(root: Path) -> dict[str, tuple[int, int, int, bytes]]:
    """Every path under ``root`` with its owner, mode, mtime and content."""
    result = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        content = path.read_bytes() if path.is_file() else b""
        result[str(path.relative_to(root))] = (st.st_uid, st.st_mode, st.st_mtime_ns, content)
    return result


def junit_properties(path: Path) -> dict[str, dict[str, str]]:
    """Each test's user properties in a junitxml report, by test name."""
    found = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        found[case.get("name")] = {p.get("name"): p.get("value") for p in case.iter("property")}
    return found


# -- 1. an unchanged suite compiles nothing the second time -----------------------------


@pytest.mark.compiles
def test_rerun_of_an_unchanged_suite_loads_from_cache(
    scenario: pytest.Pytester, golden: Golden, tmp_path: Path
) -> None:
    # the golden run: an empty cache, one real compile
    golden.first_run.stdout.fnmatch_lines(
        ["aoti: 1 program; 1 compiled in *; 0 loaded from cache in *"]
    )
    first = junit_properties(golden.first_run_junit)["test_model[cpu]"]
    assert first["aoti_cache_hit"] == "False"
    assert first["aoti_program"] == golden.key
    assert float(first["aoti_original_compile_seconds"]) > 0

    cache = copy_of(golden, tmp_path)
    (entry,) = entries(cache)
    meta = meta_of(entry)
    meta["last_used"] = meta["created"] - 3600  # an hour ago: the hit must refresh it
    (entry / "meta.json").write_text(json.dumps(meta))
    junit = tmp_path / "junit.xml"

    result = run_inner(scenario, cache, f"--junitxml={junit}")

    result.assert_outcomes(passed=1, warnings=0)
    result.stdout.fnmatch_lines(["aoti: 1 program; 0 compiled in *; 1 loaded from cache in *"])
    second = junit_properties(junit)["test_model[cpu]"]
    assert second["aoti_cache_hit"] == "True"
    assert second["aoti_program"] == golden.key
    # nothing compiled in this run; the original compile's time travels with the entry
    assert second["aoti_compile_seconds"] == "0.0"
    assert second["aoti_original_compile_seconds"] == first["aoti_original_compile_seconds"]
    assert meta_of(entry)["last_used"] > meta["created"]
    assert_good_entry(entry, golden)


# -- 2, 3. a damaged package is discarded with one warning and replaced ----------------


@pytest.mark.compiles
def test_truncated_package_is_recompiled_and_replaced(
    scenario: pytest.Pytester, golden: Golden, tmp_path: Path
) -> None:
    cache = copy_of(golden, tmp_path)
    package = cache / "v1" / "entries" / golden.key / "package.pt2"
    size = package.stat().st_size
    with package.open("r+b") as f:
        f.truncate(size // 2)

    result = run_inner(scenario, cache)

    assert_recompiled_after_one_warning(
        result,
        "*aoti: cache problems (worked around; no test failed)*",
        f"*pytest-aoti cache entry {golden.key} not used: "
        f"truncated: {size // 2} of {size} bytes; removed it",
    )
    assert_one_good_entry(cache, golden)

    again = run_inner(scenario, cache)
    again.assert_outcomes(passed=1, warnings=0)
    again.stdout.fnmatch_lines(["aoti: 1 program; 0 compiled in *; 1 loaded from cache in *"])


@pytest.mark.compiles
def test_damaged_entry_never_fails_a_test_under_filterwarnings_error(
    scenario: pytest.Pytester, golden: Golden, tmp_path: Path
) -> None:
    """A damaged entry is repaired and listed in the summary; a warning would turn into a
    failure under ``filterwarnings = error`` and pass on the next run: a flaky test."""
    cache = copy_of(golden, tmp_path)
    package = cache / "v1" / "entries" / golden.key / "package.pt2"
    with package.open("r+b") as f:
        f.truncate(10)
    scenario.makeini("[pytest]\nfilterwarnings = error\n")

    result = run_inner(scenario, cache)

    assert_recompiled_after_one_warning(
        result,
        "*aoti: cache problems (worked around; no test failed)*",
        f"*pytest-aoti cache entry {golden.key} not used: truncated: 10 of *; removed it",
    )
    assert_one_good_entry(cache, golden)


@pytest.mark.compiles
def test_flipped_byte_is_a_checksum_mismatch(
    scenario: pytest.Pytester, golden: Golden, tmp_path: Path
) -> None:
    cache = copy_of(golden, tmp_path)
    package = cache / "v1" / "entries" / golden.key / "package.pt2"
    data = bytearray(package.read_bytes())
    data[len(data) // 2] ^= 0x01
    package.write_bytes(bytes(data))

    result = run_inner(scenario, cache)

    assert_recompiled_after_one_warning(
        result,
        f"*pytest-aoti cache entry {golden.key} not used: checksum mismatch; removed it",
    )
    assert_one_good_entry(cache, golden)


# -- 4. an unusable cache directory turns the cache off -----------------------------------


@pytest.mark.compiles
def test_unusable_cache_dir_is_a_usage_error_at_startup(
    scenario: pytest.Pytester, tmp_path: Path
) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("a regular file where the cache's parent should be\n")
    cache = not_a_dir / "cache"

    result = run_inner(scenario, cache)

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"*--aoti-cache-dir={cache}: pytest-aoti cache {cache} is off for this run: "
            f"cannot create {cache}: Not a directory; pass a directory you can write to*"
        ]
    )
    assert "readwrite" not in result.stdout.str()
    assert not_a_dir.read_text() == "a regular file where the cache's parent should be\n"


@pytest.mark.parametrize("where", ["file", "proc"])
def test_cache_dir_that_is_a_file_or_under_proc_is_a_usage_error(
    pytester: pytest.Pytester, tmp_path: Path, where: str
) -> None:
    pytester.makepyfile("def test_x(): pass")
    cache = tmp_path / "plain-file"
    cache.write_text("")
    if where == "proc":
        cache = Path("/proc/pytest-aoti-cache")
    result = pytester.runpytest(f"--aoti-cache-dir={cache}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines([f"*--aoti-cache-dir={cache}: *pytest-aoti cache*"])


# -- 5. entries of other format versions ----------------------------------------------------


@pytest.mark.compiles
def test_entry_of_an_older_format_is_replaced_silently(
    scenario: pytest.Pytester, golden: Golden, tmp_path: Path
) -> None:
    cache = copy_of(golden, tmp_path)
    # an older plugin's layout next to ours: never read, never removed
    old = cache / "v0" / "entries" / golden.key
    old.mkdir(parents=True)
    (old / "package.pt2").write_bytes(b"an old package")
    (old / "meta.json").write_text('{"format_version": 0}')
    before_old = snapshot(cache / "v0")
    # and an entry in our directory that says it has the older format
    (entry,) = entries(cache)
    meta = meta_of(entry)
    meta["format_version"] = 0
    (entry / "meta.json").write_text(json.dumps(meta))

    result = run_inner(scenario, cache)

    result.assert_outcomes(passed=1, warnings=0)  # and no warning: an old entry is not a fault
    result.stdout.fnmatch_lines(["aoti: 1 program; 1 compiled in *; 0 loaded from cache in *"])
    assert_one_good_entry(cache, golden)
    assert snapshot(cache / "v0") == before_old


# -- 6. paths owned by another user are refused and left alone ---------------------------


def _chown_tree(root: Path, uid: int) -> None:
    for path in [root, *root.rglob("*")]:
        os.lchown(path, uid, -1)


@pytest.mark.compiles
@needs_root
def test_foreign_cache_dir_is_refused(
    scenario: pytest.Pytester, golden: Golden, tmp_path: Path
) -> None:
    cache = copy_of(golden, tmp_path)
    os.chown(cache, FOREIGN_UID, -1)
    before = snapshot(cache)

    result = run_inner(scenario, cache)

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*pytest-aoti cache refused, off for this run: "
            f"{cache} is owned by uid {FOREIGN_UID}, not you*"
        ]
    )
    assert snapshot(cache) == before
    assert cache.stat().st_uid == FOREIGN_UID


@pytest.mark.compiles
@needs_root
def test_foreign_entry_is_refused_and_kept(
    scenario: pytest.Pytester, golden: Golden, tmp_path: Path
) -> None:
    cache = copy_of(golden, tmp_path)
    (entry,) = entries(cache)
    _chown_tree(entry, FOREIGN_UID)
    before = snapshot(entry)

    result = run_inner(scenario, cache)

    # refused on lookup, and not overwritten by the fresh compile either
    result.assert_outcomes(passed=1, warnings=0)
    result.stdout.fnmatch_lines(
        [
            f"*pytest-aoti cache entry {golden.key} not used: "
            f"entry directory is owned by uid {FOREIGN_UID}, not you; left it in place",
            f"*pytest-aoti could not store {golden.key} in the cache: "
            f"the existing entry is owned by uid {FOREIGN_UID}, not you",
            "aoti: 1 program; 1 compiled in *; 0 loaded from cache in *",
        ]
    )
    assert snapshot(entry) == before
    assert entries(cache) == [entry]
    assert list((cache / "v1" / "tmp").iterdir()) == []


# -- 7. processes racing for one key compile it once ---------------------------------------


@pytest.mark.compiles
def test_xdist_workers_racing_for_one_key_compile_it_once(
    pytester: pytest.Pytester, golden: Golden, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    pytester.makepyfile(test_race=MODEL + RACE_TESTS.format(barrier=str(tmp_path / "barrier")))
    fake_compile(pytester, golden, delay=1.0)

    result = pytester.runpytest_subprocess(
        "test_race.py",  # the golden program's own test file may share the folder
        "-n",
        "2",
        "-p",
        "no:cacheprovider",
        "--aoti-device=cpu",
        f"--aoti-cache-dir={cache}",
        timeout=180,
    )

    result.assert_outcomes(passed=2, warnings=0)
    # the controller's line merges both workers: one compiled, the other loaded it
    result.stdout.fnmatch_lines(["aoti: 1 program; 1 compiled in *; 1 loaded from cache in *"])
    assert_one_good_entry(cache, golden)


@pytest.mark.compiles
def test_plain_processes_racing_for_one_key_compile_it_once(
    pytester: pytest.Pytester, golden: Golden, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    pytester.makepyfile(test_race=MODEL + RACE_TESTS.format(barrier=str(tmp_path / "barrier")))
    fake_compile(pytester, golden, delay=1.0)

    def start(test: str, hash_seed: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:xdist",
                "-p",
                "no:cacheprovider",
                "--aoti-device=cpu",
                f"--aoti-cache-dir={cache}",
                f"--junitxml={tmp_path / test}.xml",
                f"test_race.py::{test}",
            ],
            cwd=pytester.path,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    processes = [start("test_first", "1"), start("test_second", "2")]
    outputs = [p.communicate(timeout=180)[0] for p in processes]

    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output
        assert " 1 passed in " in output and "warning" not in output, output
    figures = [summary(output) for output in outputs]
    assert sorted(figures) == [(1, 0, 1), (1, 1, 0)], outputs
    keys = {
        junit_properties(tmp_path / f"{test}.xml")[f"{test}[cpu]"]["aoti_program"]
        for test in ("test_first", "test_second")
    }
    assert keys == {golden.key}  # the same key in three processes
    assert_one_good_entry(cache, golden)


# -- 8. cache modes and clearing ------------------------------------------------------------


@pytest.mark.compiles
def test_cache_off_creates_nothing(scenario: pytest.Pytester, tmp_path: Path) -> None:
    cache = tmp_path / "cache"

    result = run_inner(scenario, cache, "--aoti-cache=off")

    result.assert_outcomes(passed=1, warnings=0)
    result.stdout.fnmatch_lines(["aoti: 1 program; 1 compiled in *; 0 loaded from cache in *"])
    assert not cache.exists()


@pytest.mark.compiles
def test_read_mode_never_writes(scenario: pytest.Pytester, golden: Golden, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o700)

    result = run_inner(scenario, empty, "--aoti-cache=read")

    result.assert_outcomes(passed=1, warnings=0)
    result.stdout.fnmatch_lines(["aoti: 1 program; 1 compiled in *; 0 loaded from cache in *"])
    assert list(empty.iterdir()) == []

    # a hit in read mode loads, and does not even refresh last_used
    cache = copy_of(golden, tmp_path)
    (entry,) = entries(cache)
    meta = meta_of(entry)
    meta["last_used"] = meta["created"] - 3600
    (entry / "meta.json").write_text(json.dumps(meta))
    before = snapshot(cache)

    result = run_inner(scenario, cache, "--aoti-cache=read")

    result.assert_outcomes(passed=1, warnings=0)
    result.stdout.fnmatch_lines(["aoti: 1 program; 0 compiled in *; 1 loaded from cache in *"])
    assert snapshot(cache) == before


@pytest.mark.compiles
def test_cache_clear_empties_the_store_at_session_start(
    scenario: pytest.Pytester, golden: Golden, tmp_path: Path
) -> None:
    cache = copy_of(golden, tmp_path)
    other = tmp_path / "other.pt2"
    other.write_bytes(b"another program")
    assert ArtifactStore(cache).store("c0ffee", other, {}) is not None
    assert len(entries(cache)) == 2

    result = run_inner(scenario, cache, "--aoti-cache-clear")

    result.assert_outcomes(passed=1, warnings=0)
    result.stdout.fnmatch_lines(["aoti: 1 program; 1 compiled in *; 0 loaded from cache in *"])
    (entry,) = entries(cache)  # the other entry is gone; ours was published again
    assert_good_entry(entry, golden)


def cache_with_a_stale_entry(golden: Golden, tmp_path: Path) -> tuple[Path, Path, int]:
    """A copy of the golden cache plus an entry last used long ago; the size limit that
    holds our entry but not both."""
    cache = copy_of(golden, tmp_path)
    other = tmp_path / "other.pt2"
    other.write_bytes(bytes(1000))
    assert ArtifactStore(cache).store("c0ffee", other, {}) is not None
    old = cache / "v1" / "entries" / "c0ffee"
    meta = meta_of(old)
    meta["last_used"] = meta["created"] = 1.0
    (old / "meta.json").write_text(json.dumps(meta))
    (ours,) = [entry for entry in entries(cache) if entry.name == golden.key]
    return cache, ours, sum(f.stat().st_size for f in ours.iterdir()) + 100


@pytest.mark.compiles
def test_store_over_its_size_loses_the_least_recently_used_entry(
    scenario: pytest.Pytester, golden: Golden, tmp_path: Path
) -> None:
    cache, ours, limit = cache_with_a_stale_entry(golden, tmp_path)

    result = run_inner(scenario, cache, f"--aoti-cache-max-size={limit}")

    result.assert_outcomes(passed=1, warnings=0)
    result.stdout.fnmatch_lines(["aoti: 1 program; 0 compiled in *; 1 loaded from cache in *"])
    assert entries(cache) == [ours]
    assert_good_entry(ours, golden)


# -- 9. the content key ---------------------------------------------------------------------

KEY_SCRIPT = textwrap.dedent(
    """
    import json
    import torch
    from pytest_aoti.cache.key import program_key

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(3, 2)
            with torch.no_grad():
                self.linear.weight.copy_(torch.arange(6.0).reshape(2, 3))
                self.linear.bias.fill_(0.5)
            self.register_buffer("scale", torch.tensor([2.0, 3.0]))

        def forward(self, x, y):
            return {"out": self.linear(x) * self.scale, "rest": (y.relu(), y.sum())}

    exported = torch.export.export(Model(), (torch.ones(4, 3), torch.ones(2)))
    key = program_key(exported, device=torch.device("cpu"), inductor_configs={"max_autotune": False})
    print(json.dumps({"digest": key.digest, "parts": key.parts, "persistable": key.persistable}))
    """
)


def test_key_is_the_same_in_two_processes(tmp_path: Path) -> None:
    # different hash seeds: a key that leaked set or dict order of strings would differ
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", KEY_SCRIPT],
            env={**os.environ, "PYTHONHASHSEED": seed},
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in ("1", "2")
    ]
    outputs = [p.communicate(timeout=120) for p in processes]
    for process, (_, err) in zip(processes, outputs):
        assert process.returncode == 0, err
    first, second = (json.loads(out.strip().splitlines()[-1]) for out, _ in outputs)
    assert first == second
    assert first["persistable"] is True
    assert set(first["parts"]) == {"graph", "weights", "configs", "device", "torch"}


def test_key_changes_with_weights_configs_and_device(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    import torch._inductor.config as inductor_config

    from pytest_aoti.cache.key import program_key

    class Model(torch.nn.Module):
        def __init__(self, bias: float = 0.5) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(3, 2)
            with torch.no_grad():
                self.linear.weight.copy_(torch.arange(6.0).reshape(2, 3))
                self.linear.bias.fill_(bias)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x).relu()

    def export(bias: float = 0.5) -> Any:
        return torch.export.export(Model(bias), (torch.ones(4, 3),))

    def key(exported: Any, device: str = "cpu", configs: dict[str, Any] | None = None) -> Any:
        return program_key(exported, device=torch.device(device), inductor_configs=configs)

    def changed(a: Any, b: Any) -> set[str]:
        assert a.digest != b.digest
        return {name for name in a.parts if a.parts[name] != b.parts[name]}

    exported = export()
    base = key(exported)
    assert key(export()) == base  # a second export of the same module

    assert changed(base, key(export(bias=0.25))) == {"weights"}
    assert changed(base, key(exported, configs={"max_autotune": True})) == {"configs"}
    assert key(exported, configs={"max_autotune": False}) == key(
        exported, configs={"max_autotune": False}
    )
    with inductor_config.patch({"cpp.simdlen": 8}):
        # the vector width also picks the ISA the host's code is built for
        assert changed(base, key(exported)) == {"configs", "device"}
    with inductor_config.patch({"cpp.min_chunk_size": 1024}):
        assert changed(base, key(exported)) == {"configs"}
    assert key(exported) == base  # the global configuration restored

    assert changed(base, key(exported, device="meta")) == {"device"}
    # a CUDA key names the GPU's architecture: fake two GPUs on this CPU-only machine
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: (9, 0))
    hopper = key(exported, device="cuda:0")
    assert changed(base, hopper) == {"device"}
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: (8, 0))
    assert changed(hopper, key(exported, device="cuda:0")) == {"device"}


# -- 10. a publish that fails half-way --------------------------------------------------------


@pytest.mark.compiles
def test_publish_failing_half_way_leaves_no_partial_entry(
    pytester: pytest.Pytester, golden: Golden, tmp_path: Path
) -> None:
    pytester.makepyfile(test_model=ONE_TEST)
    fake_compile(pytester, golden, delay=0.0, extra=FAILING_PUBLISH)
    cache = tmp_path / "cache"

    result = run_inner(pytester, cache)

    assert_recompiled_after_one_warning(
        result,
        f"*pytest-aoti could not store {golden.key} in the cache: *No space left on device*",
    )
    assert entries(cache) == []
    assert list((cache / "v1" / "tmp").iterdir()) == []
    # and the next session, whose disk is fine, publishes it
    fake_compile(pytester, golden, delay=0.0)
    again = run_inner(pytester, cache)
    again.assert_outcomes(passed=1, warnings=0)
    assert_one_good_entry(cache, golden)
    (entry,) = entries(cache)
    assert stat.S_IMODE(entry.stat().st_mode) == 0o700


# -- a hit that turns out unusable after the store verified it -----------------------------

# Another process empties the store (``--aoti-cache-clear`` takes no lock) right after
# this session's lookup verified the entry, before the session copied the package out.
ENTRY_LOST_AFTER_LOOKUP = textwrap.dedent(
    """

    from pytest_aoti.cache.store import ArtifactStore


    @pytest.fixture(autouse=True)
    def _entry_removed_right_after_lookup(monkeypatch):
        lookup = ArtifactStore.lookup

        def lookup_then_lose_it(self, key):
            entry = lookup(self, key)
            if entry is not None:
                shutil.rmtree(entry.package_path.parent)
            return entry

        monkeypatch.setattr(ArtifactStore, "lookup", lookup_then_lose_it)
    """
)


@pytest.mark.compiles
def test_entry_removed_between_lookup_and_copy_is_recompiled(
    pytester: pytest.Pytester, golden: Golden, tmp_path: Path
) -> None:
    pytester.makepyfile(test_model=ONE_TEST)
    fake_compile(pytester, golden, delay=0.0, extra=ENTRY_LOST_AFTER_LOOKUP)
    cache = copy_of(golden, tmp_path)

    result = run_inner(pytester, cache)

    assert_recompiled_after_one_warning(
        result,
        f"*pytest-aoti cache entry {golden.key} could not be read: "
        "*No such file or directory*; recompiling",
    )
    assert_one_good_entry(cache, golden)


@pytest.mark.compiles
def test_entry_with_unusable_caller_metadata_is_recompiled(
    scenario: pytest.Pytester, golden: Golden, tmp_path: Path
) -> None:
    # meta.json is not covered by the checksum: say, a plugin version that wrote the same
    # store format but its own metadata, without the mutation signature
    cache = copy_of(golden, tmp_path)
    (entry,) = entries(cache)
    meta = meta_of(entry)
    del meta["caller"]["signature"]
    (entry / "meta.json").write_text(json.dumps(meta))

    result = run_inner(scenario, cache)

    assert_recompiled_after_one_warning(
        result,
        f"*pytest-aoti cache entry {golden.key} has metadata this version cannot use "
        "(KeyError: 'signature'); recompiling",
    )
    assert_one_good_entry(cache, golden)
    assert "signature" in meta_of(entry)["caller"]


@pytest.mark.compiles
def test_xdist_controller_enforces_the_size_limit(
    scenario: pytest.Pytester, golden: Golden, tmp_path: Path
) -> None:
    cache, ours, limit = cache_with_a_stale_entry(golden, tmp_path)

    result = scenario.runpytest_subprocess(
        "-n",
        "2",
        "-p",
        "no:cacheprovider",
        "--aoti-device=cpu",
        f"--aoti-cache-dir={cache}",
        f"--aoti-cache-max-size={limit}",
        timeout=180,
    )

    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["aoti: 1 program; 0 compiled in *; 1 loaded from cache in *"])
    assert entries(cache) == [ours]


# -- a warm rerun does not search for the machine's compile target ------------------------------

# Counts every search for the host's compile target in the test process: the plugin's
# (compiling/machine.py) and Inductor's ISA test builds, which torch's package loader asks for.
ISA_SPY = textwrap.dedent(
    """

    import json

    SEARCHES = Path({spy!r})


    @pytest.fixture(autouse=True)
    def _count_isa_searches(monkeypatch):
        from torch._inductor import cpu_vec_isa

        from pytest_aoti.compiling import machine

        seen = []
        check_build, find_target = cpu_vec_isa.VecISA.check_build, machine.find_target

        def counted_check_build(self, code):
            seen.append(f"check_build {{self}}")
            return check_build(self, code)

        def counted_find_target():
            seen.append("find_target")
            return find_target()

        monkeypatch.setattr(cpu_vec_isa.VecISA, "check_build", counted_check_build)
        monkeypatch.setattr(machine, "find_target", counted_find_target)
        yield
        SEARCHES.write_text(json.dumps(seen))
    """
)


@pytest.mark.compiles
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist"])
def test_a_warm_rerun_reads_the_machine_target_from_the_cache(
    scenario: pytest.Pytester, golden: Golden, tmp_path: Path, workers: list[str]
) -> None:
    cache, spy = copy_of(golden, tmp_path), tmp_path / "searches.json"
    (record,) = (cache / "machine").glob("cpu-*.json")
    fake_compile(scenario, golden, delay=0.0, extra=ISA_SPY.format(spy=str(spy)))

    # a fresh process: nothing of Inductor's ISA answer is cached in memory
    result = scenario.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--aoti-device=cpu",
        f"--aoti-cache-dir={cache}",
        *workers,
        timeout=180,
    )

    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["aoti: 1 program; 0 compiled in *; 1 loaded from cache in *"])
    assert json.loads(spy.read_text()) == []
    assert json.loads(record.read_text())["target"]["march"]


@pytest.mark.compiles
def test_a_lost_machine_record_is_written_again_with_the_same_key(
    scenario: pytest.Pytester, golden: Golden, tmp_path: Path
) -> None:
    cache = copy_of(golden, tmp_path)
    (record,) = (cache / "machine").glob("cpu-*.json")
    record.unlink()

    result = run_inner(scenario, cache)

    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["aoti: 1 program; 0 compiled in *; 1 loaded from cache in *"])
    assert [path.name for path in (cache / "machine").glob("cpu-*.json")] == [record.name]
