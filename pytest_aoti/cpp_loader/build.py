"""The runner's build (:file:`runner.cpp`), once per torch build and compiler: its key, the
folder it is kept in (``cpp-loader/<key>/`` under the cache root), the build under a file lock
(xdist workers build it once) in a child process with a time limit, and a failed build
remembered with its reason, so that it is not tried again at every check."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from pytest_aoti.api import replace_text
from pytest_aoti.cpp_loader.toolchain import (
    compiler_identity,
    find_compiler,
    headers_reason,
    torch_folder,
)

FORMAT = "pytest-aoti-cpp-loader-1"
"""The build record's format; part of the key."""
SOURCE = Path(__file__).with_name("runner.cpp")
FOLDER = "cpp-loader"
"""The runners' folder under the cache root: ``cpp-loader/<key>/runner`` and ``build.json``."""
BINARY = "runner"
RECORD = "build.json"
BUILD_SECONDS = 300.0
"""The build's time limit; a build past it is remembered in this process only."""
START_SECONDS = 60.0
"""Seconds the built runner may take to start (load torch's libraries) before it is given up."""
LOCK_SECONDS = BUILD_SECONDS + START_SECONDS + 60.0
"""Seconds a process waits for another's build of the same key."""
_RECORD_LIMIT = 64 * 1024


@dataclass(frozen=True)
class Build:
    """A runner to start, or why there is none."""

    binary: Path | None
    reason: str = ""
    """Why there is no runner: one line (the compiler's first error, the start's failure)."""
    seconds: float = 0.0
    """Seconds its build took, where it was built."""
    built_here: bool = False
    """Built by this process (its seconds are this run's cost)."""


def torch_identity(folder: Path | None) -> dict[str, str]:
    """torch's version, git version and library folder, read from its files without importing
    it (the C++ ABI follows from the build these name)."""
    text = ""
    if folder is not None:
        with contextlib.suppress(OSError):
            text = (folder / "version.py").read_text(encoding="utf-8")

    def field(name: str) -> str:
        match = re.search(rf"^{name}\s*(?::[^=]*)?=\s*['\"]([^'\"]*)['\"]", text, re.MULTILINE)
        return match.group(1) if match else "unknown"

    return {
        "torch": field("__version__"),
        "git": field("git_version"),
        "torch_lib": str(folder / "lib") if folder is not None else "",
    }


def source_digest(source: Path = SOURCE) -> str:
    return hashlib.sha256(source.read_bytes()).hexdigest()[:16]


def build_identity(compiler: str, folder: Path | None, source: Path = SOURCE) -> dict[str, str]:
    """Everything the runner's binary depends on, each as text."""
    return {
        "format": FORMAT,
        **torch_identity(folder),
        "compiler": compiler_identity(compiler),
        "source": source_digest(source),
    }


def build_key(identity: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(dict(identity), sort_keys=True).encode()).hexdigest()[:20]


def compile_command(
    compiler: str,
    source: Path,
    output: Path,
    *,
    cxx11_abi: bool,
    include_dirs: Sequence[str],
    library_dirs: Sequence[str],
) -> list[str]:
    """The one compile-and-link command: torch's headers, its libraries linked (each kept,
    so a CUDA build's backends register) and found at run time through the rpath."""
    return [
        compiler,
        "-std=c++20",
        "-O1",
        "-DNDEBUG",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(cxx11_abi)}",
        *(f"-I{folder}" for folder in include_dirs),
        str(source),
        "-o",
        str(output),
        *(f"-L{folder}" for folder in library_dirs),
        *(f"-Wl,-rpath,{folder}" for folder in library_dirs),
        "-Wl,--no-as-needed",
        "-ltorch",
        "-ltorch_cpu",
        "-lc10",
        "-Wl,--allow-shlib-undefined",
        "-ldl",
        "-pthread",
    ]


def first_error(output: str, limit: int = 300) -> str:
    """The compiler's first error line (else its last line), shortened to ``limit``."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    line = next((line for line in lines if "error" in line.lower()), lines[-1] if lines else "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def read_record(path: Path, identity: Mapping[str, str]) -> dict[str, Any] | None:
    """The build record of ``identity`` at ``path``: a small regular file, else None."""
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode) or st.st_size > _RECORD_LIMIT:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    if data.get("identity") != dict(identity) or not isinstance(data.get("ok"), bool):
        return None
    return data


def write_record(path: Path, identity: Mapping[str, str], build: Build, command: str) -> None:
    data = {
        "format": FORMAT,
        "identity": dict(identity),
        "ok": build.binary is not None,
        "reason": build.reason,
        "seconds": round(build.seconds, 3),
        "command": command,
    }
    with contextlib.suppress(OSError):
        replace_text(path, json.dumps(data, indent=1, sort_keys=True))


def remembered_failure(root: Path | None, environ: Mapping[str, str] | None = None) -> str:
    """The reason of a failed build of this machine's key kept under ``root`` ("" for none):
    for the session header, without importing torch."""
    if root is None:
        return ""
    compiler, _ = find_compiler(environ)
    if compiler is None:
        return ""
    identity = build_identity(compiler, torch_folder())
    record = read_record(root / FOLDER / build_key(identity) / RECORD, identity)
    if record is None or record["ok"]:
        return ""
    return str(record.get("reason") or "the runner did not build")


_lock = threading.Lock()
_built: dict[tuple[str, str], Build] = {}
"""This process's builds by (key, folder): found once, then read from here."""


def runner_build(root: Path | None, *, writable: bool = True) -> Build:
    """This machine's runner: kept under ``root`` (built there under its lock where missing
    and ``writable``), else built in a folder of this process's own."""
    compiler, why = find_compiler()
    if compiler is None:
        return Build(None, why)
    folder = torch_folder()
    why = headers_reason(folder)
    if why:
        return Build(None, why)
    identity = build_identity(compiler, folder)
    key = build_key(identity)
    with _lock:
        place = root / FOLDER if root is not None else None
        memo = (key, str(place))
        if memo not in _built:
            _built[memo] = _kept_or_built(place, writable, compiler, identity, key)
        return _built[memo]


def _kept_or_built(
    place: Path | None, writable: bool, compiler: str, identity: dict[str, str], key: str
) -> Build:
    if place is not None:
        kept = _kept(place / key, identity)
        if kept is not None or not writable:
            return kept if kept is not None else _build(_own_folder() / key, compiler, identity)
        try:
            place.mkdir(mode=0o700, parents=True, exist_ok=True)
            with FileLock(str(place / f"{key}.lock"), timeout=LOCK_SECONDS, mode=0o600):
                kept = _kept(place / key, identity)  # another process may have built it
                return kept if kept is not None else _build(place / key, compiler, identity)
        except Timeout:
            return Build(None, f"another process held the runner's build lock {LOCK_SECONDS:.0f} s")
        except OSError:
            pass  # the cache folder cannot take it: a folder of this process's own
    return _build(_own_folder() / key, compiler, identity)


def _kept(folder: Path, identity: Mapping[str, str]) -> Build | None:
    """The runner or the failure recorded in ``folder``, else None."""
    record = read_record(folder / RECORD, identity)
    if record is None:
        return None
    if not record["ok"]:
        return Build(None, str(record.get("reason") or "the runner did not build"))
    binary = folder / BINARY
    return Build(binary) if os.access(binary, os.X_OK) else None


def _build(folder: Path, compiler: str, identity: Mapping[str, str]) -> Build:
    """Build into ``folder`` and record the result there (a time-out only in this process)."""
    import torch
    from torch.utils import cpp_extension

    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = folder / f".{BINARY}.{os.getpid()}.tmp"
    command = compile_command(
        compiler,
        SOURCE,
        temporary,
        cxx11_abi=bool(torch.compiled_with_cxx11_abi()),
        include_dirs=cpp_extension.include_paths(),
        library_dirs=cpp_extension.library_paths(),
    )
    started = time.perf_counter()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=BUILD_SECONDS, check=False
        )
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            temporary.unlink()
        return Build(None, f"the runner did not build within {BUILD_SECONDS:.0f} s")
    except OSError as error:
        return Build(None, f"the compiler did not start: {error}")
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        with contextlib.suppress(OSError):
            temporary.unlink()
        line = first_error(done.stderr + done.stdout)
        build = Build(None, f"the runner did not build against this torch: {line}", seconds, True)
        if done.returncode < 0:  # killed (out of memory, say): tried again by a later run
            return build
    else:
        why = _start_problem(temporary)
        if why:
            with contextlib.suppress(OSError):
                temporary.unlink()
            build = Build(None, f"the runner built but does not start: {why}", seconds, True)
            if why.startswith(_TIMED_OUT):  # a busy machine: tried again by a later run
                return build
        else:
            os.replace(temporary, folder / BINARY)
            build = Build(folder / BINARY, "", seconds, True)
    write_record(folder / RECORD, identity, build, " ".join(command))
    return build


_TIMED_OUT = "it did not say it was ready within"


def _start_problem(binary: Path) -> str:
    """Why ``binary`` does not start and say ``ready`` ("" when it does)."""
    try:
        done = subprocess.run(
            [str(binary)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=START_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"{_TIMED_OUT} {START_SECONDS:.0f} s"
    except (OSError, subprocess.SubprocessError) as error:
        return str(error)
    if done.returncode == 0 and done.stdout.startswith("ready"):
        return ""
    return first_error(done.stderr) or f"exit status {done.returncode}"


_own: list[Path] = []


def _own_folder() -> Path:
    """A folder of this process's own, removed at its exit (no cache folder to keep it in)."""
    if not _own:
        _own.append(Path(tempfile.mkdtemp(prefix="pytest-aoti-cpp-loader-")))
        atexit.register(shutil.rmtree, _own[0], True)
    return _own[0]
