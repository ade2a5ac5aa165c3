"""The runner's build (:file:`runner.cpp`), once per torch build and compiler: its key, the
folder it is kept in (``cpp-loader/<key>/`` under the cache root), the build under a file lock
(xdist workers build it once) in a child process with a time limit, and a failed build
remembered with its reason, so that it is not tried again at every check. The session starts
the build in a thread of its own (:class:`BackgroundBuild`) before its first check needs it;
the check then waits only for what remains of it."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
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
    machine_reason,
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
STOP_SECONDS = 5.0
"""Seconds the end of a session waits for a background build it stopped to clean up."""
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


class BuildStopped(Exception):
    """The session ended during a background build: its child was killed, nothing was kept
    or remembered, and a later run builds again."""


class Stop:
    """The children of one build, and the switch that ends them (:meth:`set`): each runs as
    ``subprocess.run`` would, in a process group of its own, so that a compiler's own
    children end with it."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._guard = threading.Lock()
        self._children: set[subprocess.Popen[str]] = set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def set(self) -> None:
        """End the build: its running child is killed; it starts no other."""
        with self._guard:
            self._event.set()
            for child in self._children:
                _kill(child)

    def run(self, command: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
        """``command``'s exit and output, as ``subprocess.run`` with ``capture_output`` and
        ``timeout`` gives them; :class:`BuildStopped` where the build was ended."""
        with self._guard:
            if self._event.is_set():
                raise BuildStopped
            child = subprocess.Popen(
                list(command),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            self._children.add(child)
        try:
            try:
                out, err = child.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill(child)
                child.communicate()
                raise
            except BaseException:
                _kill(child)
                child.wait()
                raise
        finally:
            with self._guard:
                self._children.discard(child)
        if self._event.is_set():
            raise BuildStopped
        return subprocess.CompletedProcess(list(command), child.returncode, out, err)


def _kill(child: subprocess.Popen[str]) -> None:
    """Kill ``child`` and its process group (a compiler's ``cc1plus``, its linker)."""
    if child.returncode is not None:
        return
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (AttributeError, OSError):
        with contextlib.suppress(OSError):
            child.kill()


class BackgroundBuild:
    """:func:`runner_build` in a thread of its own, started before the first check needs the
    runner: the check's own call then finds it built, or waits for what remains. Whatever
    goes wrong here the check meets again and reports; :meth:`stop` ends a build still
    running when the session ends."""

    def __init__(self, root: Path | None, *, writable: bool) -> None:
        self.stopping = Stop()
        self.thread = threading.Thread(
            target=self._build,
            args=(root, writable),
            name="pytest-aoti-cpp-loader-build",
            daemon=True,
        )

    def _build(self, root: Path | None, writable: bool) -> None:
        with contextlib.suppress(Exception):  # stopped, or met again by the check
            runner_build(root, writable=writable, stop=self.stopping)

    def stop(self, wait: float = STOP_SECONDS) -> None:
        """End the build if it still runs (its compiler killed, its output removed, nothing
        recorded), waiting at most ``wait`` seconds for it to clean up."""
        if self.thread.is_alive():
            self.stopping.set()
            self.thread.join(wait)


def start_runner_build(root: Path | None, *, writable: bool = True) -> BackgroundBuild | None:
    """Start building this machine's runner in the background (None where the machine has no
    compiler or headers: the check says why)."""
    if machine_reason():
        return None
    try:  # imported here, not in the thread beside the test's own imports
        import torch.utils.cpp_extension  # noqa: F401
    except Exception:  # the check meets it again and says why
        return None
    background = BackgroundBuild(root, writable=writable)
    background.thread.start()
    return background


_lock = threading.Lock()
_locks: dict[tuple[str, str], threading.Lock] = {}
"""One lock per build (key, folder): a check waits for a build under way in the background."""
_built: dict[tuple[str, str], Build] = {}
"""This process's builds by (key, folder): found once, then read from here."""
_FOREGROUND = Stop()
"""The stop of builds made where a check needs them: never set."""


def runner_build(root: Path | None, *, writable: bool = True, stop: Stop = _FOREGROUND) -> Build:
    """This machine's runner: kept under ``root`` (built there under its lock where missing
    and ``writable``), else built in a folder of this process's own. A build that ``stop``
    ended raises :class:`BuildStopped` and is not remembered."""
    compiler, why = find_compiler()
    if compiler is None:
        return Build(None, why)
    folder = torch_folder()
    why = headers_reason(folder)
    if why:
        return Build(None, why)
    identity = build_identity(compiler, folder)
    key = build_key(identity)
    place = root / FOLDER if root is not None else None
    memo = (key, str(place))
    with _lock:
        lock = _locks.setdefault(memo, threading.Lock())
    with lock:
        if memo not in _built:
            _built[memo] = _kept_or_built(place, writable, compiler, identity, key, stop)
        return _built[memo]


def _kept_or_built(
    place: Path | None,
    writable: bool,
    compiler: str,
    identity: dict[str, str],
    key: str,
    stop: Stop,
) -> Build:
    if place is not None:
        kept = _kept(place / key, identity)
        if kept is not None or not writable:
            if kept is not None:
                return kept
            return _build(_own_folder() / key, compiler, identity, stop)
        try:
            place.mkdir(mode=0o700, parents=True, exist_ok=True)
            with _acquired(place / f"{key}.lock", stop):
                kept = _kept(place / key, identity)  # another process may have built it
                return kept if kept is not None else _build(place / key, compiler, identity, stop)
        except Timeout:
            return Build(None, f"another process held the runner's build lock {LOCK_SECONDS:.0f} s")
        except OSError:
            pass  # the cache folder cannot take it: a folder of this process's own
    return _build(_own_folder() / key, compiler, identity, stop)


def _acquired(path: Path, stop: Stop) -> contextlib.AbstractContextManager[object]:
    """``path``'s file lock, held (a context manager that releases it), waited for at most
    :data:`LOCK_SECONDS` while another process builds; :class:`BuildStopped` if ``stop``
    ends the wait."""
    lock = FileLock(str(path), mode=0o600)
    deadline = time.monotonic() + LOCK_SECONDS
    while True:
        try:
            return lock.acquire(timeout=max(0.0, min(1.0, deadline - time.monotonic())))
        except Timeout:
            if stop.is_set():
                raise BuildStopped from None
            if time.monotonic() >= deadline:
                raise


def _kept(folder: Path, identity: Mapping[str, str]) -> Build | None:
    """The runner or the failure recorded in ``folder``, else None."""
    record = read_record(folder / RECORD, identity)
    if record is None:
        return None
    if not record["ok"]:
        return Build(None, str(record.get("reason") or "the runner did not build"))
    binary = folder / BINARY
    return Build(binary) if os.access(binary, os.X_OK) else None


def _build(folder: Path, compiler: str, identity: Mapping[str, str], stop: Stop) -> Build:
    """Build into ``folder`` and record the result there (a time-out only in this process);
    the runner appears there under its name only once it built and started."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    # one build at a time holds the folder (its lock, or a folder of this process's own):
    # another's temporary binary was left by a process that ended during its build
    for stale in folder.glob(f".{BINARY}.*.tmp"):
        with contextlib.suppress(OSError):
            stale.unlink()
    temporary = folder / f".{BINARY}.{os.getpid()}.tmp"
    try:
        copied = _copied_to(temporary, folder, identity)
        if copied is not None:
            return copied
        return _build_to(temporary, folder, compiler, identity, stop)
    except BaseException:  # stopped, interrupted: no half-written binary stays
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


def _copied_to(temporary: Path, folder: Path, identity: Mapping[str, str]) -> Build | None:
    """The runner this process built for the same identity in another folder (another
    cache), copied into ``folder``: the binary depends on its identity alone. None where
    this process built none."""
    key = build_key(identity)
    with _lock:
        sources = [
            build.binary
            for (built_key, _), build in _built.items()
            if built_key == key and build.binary is not None
        ]
    for source in sources:
        try:
            shutil.copy2(source, temporary)
        except OSError:
            continue
        os.replace(temporary, folder / BINARY)
        build = Build(folder / BINARY)
        write_record(folder / RECORD, identity, build, f"copied from {source}")
        return build
    return None


def _build_to(
    temporary: Path, folder: Path, compiler: str, identity: Mapping[str, str], stop: Stop
) -> Build:
    import torch
    from torch.utils import cpp_extension

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
        done = stop.run(command, BUILD_SECONDS)
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
        why = _start_problem(temporary, stop)
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


def _start_problem(binary: Path, stop: Stop) -> str:
    """Why ``binary`` does not start and say ``ready`` ("" when it does)."""
    try:
        done = stop.run([str(binary)], START_SECONDS)
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
    with _lock:
        if not _own:
            _own.append(Path(tempfile.mkdtemp(prefix="pytest-aoti-cpp-loader-")))
            atexit.register(shutil.rmtree, _own[0], True)
        return _own[0]
