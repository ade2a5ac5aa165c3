"""The runner's build, without a compile: what the build key holds, the compile command, the
record that remembers a build (and a failed one, with its reason), and why a machine skips
the check (no compiler, no torch headers)."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest
from filelock import FileLock

from pytest_aoti.cpp_loader import build, toolchain
from pytest_aoti.cpp_loader.build import (
    FOLDER,
    RECORD,
    Build,
    build_identity,
    build_key,
    compile_command,
    first_error,
    read_record,
    remembered_failure,
    runner_build,
    torch_identity,
    write_record,
)
from pytest_aoti.cpp_loader.toolchain import LOADER_HEADER, find_compiler, headers_reason


def fake_compiler(folder: Path, version: str = "g++ (Fake) 12.2.0") -> Path:
    """An executable that prints ``version`` for ``--version``."""
    path = folder / "fake-g++"
    path.write_text(f"#!/bin/sh\necho '{version}'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def fake_torch(folder: Path, version: str = "2.13.0+cpu", git: str = "abc") -> Path:
    torch_dir = folder / "torch"
    (torch_dir / "include" / LOADER_HEADER).parent.mkdir(parents=True)
    (torch_dir / "include" / LOADER_HEADER).write_text("// the loader\n")
    (torch_dir / "version.py").write_text(
        f"__version__ = '{version}'\ndebug = False\ngit_version = '{git}'\n"
    )
    return torch_dir


def test_the_key_names_the_torch_build_the_compiler_and_the_source(tmp_path: Path) -> None:
    compiler = fake_compiler(tmp_path)
    torch_dir = fake_torch(tmp_path)
    source = tmp_path / "runner.cpp"
    source.write_text("int main() {}\n")
    identity = build_identity(str(compiler), torch_dir, source)
    assert identity["torch"] == "2.13.0+cpu" and identity["git"] == "abc"
    assert identity["torch_lib"] == str(torch_dir / "lib")
    assert "g++ (Fake) 12.2.0" in identity["compiler"]
    key = build_key(identity)
    assert key == build_key(dict(reversed(list(identity.items())))), "the order does not count"
    for part in identity:
        assert build_key({**identity, part: identity[part] + "!"}) != key, part
    source.write_text("int main() { return 0; }\n")
    assert build_identity(str(compiler), torch_dir, source)["source"] != identity["source"]
    newer = fake_compiler(tmp_path, "g++ (Fake) 13.1.0")
    assert build_identity(str(newer), torch_dir, source)["compiler"] != identity["compiler"]


def test_torch_is_read_from_its_files_without_a_folder_or_a_version_file(tmp_path: Path) -> None:
    assert torch_identity(None) == {"torch": "unknown", "git": "unknown", "torch_lib": ""}
    assert torch_identity(tmp_path)["torch"] == "unknown"


def test_the_command_links_torch_and_finds_it_at_run_time() -> None:
    command = compile_command(
        "/usr/bin/g++",
        Path("runner.cpp"),
        Path("out/runner"),
        cxx11_abi=True,
        include_dirs=["/t/include", "/t/include/torch/csrc/api/include"],
        library_dirs=["/t/lib"],
    )
    assert command[0] == "/usr/bin/g++"
    assert "-D_GLIBCXX_USE_CXX11_ABI=1" in command and "-std=c++20" in command
    assert "-I/t/include" in command and "-L/t/lib" in command
    assert "-Wl,-rpath,/t/lib" in command
    assert command.index("-Wl,--no-as-needed") < command.index("-ltorch")
    assert {"-ltorch", "-ltorch_cpu", "-lc10"} <= set(command)
    assert command[command.index("-o") + 1] == "out/runner"


def test_the_reason_of_a_failed_build_is_the_compiler_s_first_error() -> None:
    output = (
        "In file included from runner.cpp:3:\n"
        "runner.cpp:10:5: error: 'AOTIModelPackageLoader' was not declared\n"
        "runner.cpp:12:1: error: expected ';'\n"
    )
    assert (
        first_error(output) == "runner.cpp:10:5: error: 'AOTIModelPackageLoader' was not declared"
    )
    assert first_error("ld: cannot find -ltorch\ncollect2: exit status 1\n") == (
        "collect2: exit status 1"
    )
    assert first_error("error " + "x" * 500, limit=40).endswith("...")
    assert first_error("") == ""


def test_a_record_is_read_back_only_for_its_identity(tmp_path: Path) -> None:
    identity = {"format": build.FORMAT, "torch": "2.13.0", "compiler": "g++"}
    path = tmp_path / RECORD
    write_record(path, identity, Build(None, "it failed", 12.5, True), "g++ runner.cpp")
    record = read_record(path, identity)
    assert record is not None and record["ok"] is False and record["reason"] == "it failed"
    assert record["command"] == "g++ runner.cpp" and record["seconds"] == 12.5
    assert read_record(path, {**identity, "torch": "2.15.0"}) is None
    path.write_text("{not json")
    assert read_record(path, identity) is None
    path.write_text(json.dumps({"format": "other", "identity": identity, "ok": True}))
    assert read_record(path, identity) is None
    path.write_text(" " * (build._RECORD_LIMIT + 1))
    assert read_record(path, identity) is None
    assert read_record(tmp_path / "missing.json", identity) is None


def test_a_failed_build_is_remembered_and_not_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiler = fake_compiler(tmp_path)
    monkeypatch.setenv("CXX", str(compiler))
    identity = build_identity(str(compiler), toolchain.torch_folder())
    folder = tmp_path / "cache" / FOLDER / build_key(identity)
    folder.mkdir(parents=True)
    reason = "the runner did not build against this torch: runner.cpp:1: error: no"
    write_record(folder / RECORD, identity, Build(None, reason), "")

    def no_build(*args: object) -> Build:
        raise AssertionError("a remembered failure is not built again")

    monkeypatch.setattr(build, "_build", no_build)
    assert runner_build(tmp_path / "cache") == Build(None, reason)
    assert remembered_failure(tmp_path / "cache") == reason
    assert remembered_failure(tmp_path / "elsewhere") == ""
    assert remembered_failure(None) == ""


def test_a_kept_runner_is_used_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    compiler = fake_compiler(tmp_path)
    monkeypatch.setenv("CXX", str(compiler))
    identity = build_identity(str(compiler), toolchain.torch_folder())
    folder = tmp_path / "cache" / FOLDER / build_key(identity)
    folder.mkdir(parents=True)
    binary = fake_compiler(folder)
    binary.rename(folder / build.BINARY)
    write_record(folder / RECORD, identity, Build(folder / build.BINARY), "")
    monkeypatch.setattr(build, "_build", lambda *args: Build(None, "built again"))
    assert runner_build(tmp_path / "cache") == Build(folder / build.BINARY)


@pytest.mark.skipif(sys.platform != "linux", reason="a shell script as the compiler")
def test_a_runner_this_process_built_is_copied_into_another_cache_not_built_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second cache (another session of the same process) gets a copy: one compile."""
    calls = tmp_path / "calls"
    writes_a_runner = (
        f"echo run >> {calls}\n"
        'while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done\n'
        'printf \'#!/bin/sh\\necho ready\\n\' > "$out"; chmod +x "$out"'
    )
    monkeypatch.setenv("CXX", str(script_compiler(tmp_path / "runner-g++", writes_a_runner)))
    first = runner_build(tmp_path / "first")
    assert first.binary is not None and first.built_here, first
    second = runner_build(tmp_path / "second")
    assert second.binary is not None and second.binary.parent.parent.parent == tmp_path / "second"
    assert second.binary.read_bytes() == first.binary.read_bytes()
    assert not second.built_here and calls.read_text() == "run\n", "compiled once"
    [record] = (tmp_path / "second" / FOLDER).glob(f"*/{RECORD}")
    assert json.loads(record.read_text())["ok"] is True


def test_a_cxx_that_is_missing_is_the_reason_and_no_other_compiler_replaces_it() -> None:
    found = {"c++": "/usr/bin/c++", "g++": "/usr/bin/g++"}
    assert find_compiler({"CXX": "/opt/missing/clang++"}, found.get) == (
        None,
        "no C++ compiler: CXX=/opt/missing/clang++ is not found",
    )
    assert find_compiler({}, found.get) == ("/usr/bin/c++", "")
    assert find_compiler({}, {"g++": "/usr/bin/g++"}.get) == ("/usr/bin/g++", "")
    compiler, why = find_compiler({}, {}.get)
    assert compiler is None and why.startswith("no C++ compiler: neither c++ nor g++")
    assert toolchain.machine_reason({"CXX": "/opt/missing/clang++"}, found.get) == (
        "no C++ compiler: CXX=/opt/missing/clang++ is not found"
    )


def test_a_torch_without_the_loader_s_header_is_the_reason(tmp_path: Path) -> None:
    assert headers_reason(None) == "no torch installed"
    assert headers_reason(fake_torch(tmp_path)) == ""
    bare = tmp_path / "bare"
    bare.mkdir()
    why = headers_reason(bare)
    assert why.startswith("no torch C++ headers:") and LOADER_HEADER in why


def test_no_compiler_skips_before_any_torch_build_is_looked_at(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    monkeypatch.setattr(build, "build_identity", lambda *args: pytest.fail("not needed"))
    assert runner_build(tmp_path) == Build(
        None, f"no C++ compiler: CXX={tmp_path / 'no-such-c++'} is not found"
    )


def script_compiler(path: Path, body: str) -> Path:
    """A compiler that is a shell script: it names itself for ``--version`` and runs
    ``body`` for anything else."""
    path.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "--version" ]; then echo "g++ ({path.name}) 1.0"; exit 0; fi\n{body}\n'
    )
    path.chmod(0o755)
    return path


@pytest.mark.skipif(sys.platform != "linux", reason="a shell script as the compiler")
def test_a_compiler_that_fails_leaves_the_reason_in_the_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build itself, with a compiler that fails at once: no real compile."""
    failing = "echo 'runner.cpp:7:1: error: this compiler builds nothing' >&2\nexit 1"
    monkeypatch.setenv("CXX", str(script_compiler(tmp_path / "failing-g++", failing)))
    got = runner_build(tmp_path / "cache")
    assert got.binary is None and got.built_here
    assert got.reason == (
        "the runner did not build against this torch: "
        "runner.cpp:7:1: error: this compiler builds nothing"
    )
    [record] = (tmp_path / "cache" / FOLDER).glob(f"*/{RECORD}")
    assert json.loads(record.read_text())["reason"] == got.reason
    assert not [p for p in record.parent.iterdir() if p.name.endswith(".tmp")]
    assert oct(os.stat(record.parent).st_mode & 0o777) == "0o700"


@pytest.mark.skipif(sys.platform != "linux", reason="a shell script as the compiler")
def test_a_compiler_killed_by_a_signal_is_tried_again_by_a_later_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compiler killed (out of memory, say) says nothing of this torch: no record kept."""
    monkeypatch.setenv("CXX", str(script_compiler(tmp_path / "killed-g++", "kill -9 $$")))
    got = runner_build(tmp_path / "cache")
    assert got.binary is None and got.reason.startswith("the runner did not build")
    assert not list((tmp_path / "cache" / FOLDER).glob(f"*/{RECORD}"))
    assert remembered_failure(tmp_path / "cache") == ""


def waiting_compiler(folder: Path) -> Path:
    """A compiler that fails at once where ``fail`` is in ``folder``; else writes part of its
    output, names its own and its child's process ids in ``pids``, and waits a minute."""
    body = (
        f'if [ -f "{folder}/fail" ]; then\n'
        "  echo 'runner.cpp:1:1: error: the compiler failed' >&2; exit 1\n"
        "fi\n"
        'while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done\n'
        'echo half > "$out"\n'
        "sleep 60 &\n"
        f'echo "$$ $!" > "{folder}/pids.tmp" && mv "{folder}/pids.tmp" "{folder}/pids"\n'
        "wait\n"
    )
    return script_compiler(folder / "waiting-g++", body)


def wait_for(path: Path, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear within {seconds} s"
        time.sleep(0.02)


def ended(pid: int) -> bool:
    """Whether process ``pid`` is gone (or a zombie no one reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z")
    except OSError:
        return True


@pytest.mark.skipif(sys.platform != "linux", reason="a shell script as the compiler")
def test_a_background_build_the_session_ends_leaves_nothing_and_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiler and its own children are killed, its half-written output removed, and
    nothing remembered: the next build runs the compiler again."""
    monkeypatch.setenv("CXX", str(waiting_compiler(tmp_path)))
    background = build.start_runner_build(tmp_path / "cache")
    assert background is not None
    wait_for(tmp_path / "pids")
    [folder] = [p for p in (tmp_path / "cache" / FOLDER).iterdir() if p.is_dir()]
    assert [p.name for p in folder.iterdir()] == [f".{build.BINARY}.{os.getpid()}.tmp"]
    started = time.monotonic()
    background.stop()
    assert not background.thread.is_alive() and time.monotonic() - started < build.STOP_SECONDS
    assert list(folder.iterdir()) == [], "no half-written runner, no record"
    for pid in (tmp_path / "pids").read_text().split():
        assert ended(int(pid)), "the compiler's children end with it"
    (tmp_path / "fail").touch()
    got = runner_build(tmp_path / "cache")
    assert got.built_here and got.reason.endswith("runner.cpp:1:1: error: the compiler failed")


@pytest.mark.skipif(sys.platform != "linux", reason="a shell script as the compiler")
def test_a_failed_background_build_is_what_the_check_finds_and_remembered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls"
    failing = f"echo run >> {calls}\nsleep 1\necho 'runner.cpp:2:1: error: no' >&2\nexit 1"
    monkeypatch.setenv("CXX", str(script_compiler(tmp_path / "slow-g++", failing)))
    background = build.start_runner_build(tmp_path / "cache")
    assert background is not None
    wait_for(calls)
    got = runner_build(tmp_path / "cache")  # the check's call waits for the build under way
    reason = "the runner did not build against this torch: runner.cpp:2:1: error: no"
    assert got.binary is None and got.built_here and got.reason == reason
    assert calls.read_text() == "run\n", "built once"
    assert remembered_failure(tmp_path / "cache") == reason
    background.stop()


@pytest.mark.skipif(sys.platform != "linux", reason="a shell script as the compiler")
def test_a_background_build_waiting_on_another_process_s_lock_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiler = waiting_compiler(tmp_path)
    monkeypatch.setenv("CXX", str(compiler))
    key = build_key(build_identity(str(compiler), toolchain.torch_folder()))
    place = tmp_path / "cache" / FOLDER
    place.mkdir(parents=True)
    with FileLock(str(place / f"{key}.lock")):  # another process builds it
        background = build.start_runner_build(tmp_path / "cache")
        assert background is not None
        time.sleep(0.3)
        assert background.thread.is_alive()
        background.stop()
        assert not background.thread.is_alive()
    assert not (tmp_path / "pids").exists(), "no compiler ran"


def test_no_background_build_where_the_machine_has_no_compiler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    assert build.start_runner_build(tmp_path / "cache") is None
    assert not (tmp_path / "cache").exists()
