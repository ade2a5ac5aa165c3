"""What this machine's compiler builds for, found once per machine: Inductor compiles with
``-march=native``, so a package built on a newer CPU may die with SIGILL on an older one; the
content key records the resolved ``-march=``, its features and Inductor's ISA flags. Finding them
costs seconds, so the result is kept in ``machine/cpu-<identity>.json`` under the cache folder
(keyed by the CPU, torch, the compiler file and Inductor's settings; written once, under a lock)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shlex
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from pytest_aoti.atomic_files import replace_text
from pytest_aoti.compiling.vec_isa import find_isa

RECORD_FORMAT = "pytest-aoti-machine-1"
RECORD_DIR = "machine"
_RECORD_LIMIT = 64 * 1024  # a record is well under 4 KiB; anything larger is not ours
_LOCK_TIMEOUT = 120.0  # the computation takes seconds; a holder stuck longer is ignored

_memo: dict[str, MachineTarget] = {}
_kept: set[tuple[str, Path]] = set()  # (identity, folder) pairs whose record is on disk
_memo_lock = threading.Lock()


@dataclass(frozen=True)
class MachineTarget:
    """What this machine's compiled C++ is built for."""

    isa: str
    """Inductor's vector ISA (``avx512``), or ``INVALID_VEC_ISA`` where none builds."""
    isa_flags: str
    """The flags Inductor passes for that ISA (``-mavx512f -mavx512dq ...``)."""
    arch_flag: str
    """Inductor's architecture flag (``-march=native``), empty where it passes none."""
    march: str
    """What the compiler resolves that flag to (``sapphirerapids``), empty if unknown."""
    features: tuple[str, ...]
    """Every ISA feature the compiler enables for it (``avx512fp16``, ``amx-tile``, ...)."""
    valid_isas: tuple[str, ...]
    """The ISAs Inductor's build-and-load check accepted on this machine."""

    def fingerprint(self) -> str:
        """The text that enters the content key."""
        return (
            f"isa={self.isa} [{self.isa_flags}] {self.arch_flag}={self.march or '?'} "
            f"features={','.join(self.features)}"
        )


def machine_target(directory: Path | None, *, write: bool = True) -> MachineTarget:
    """This machine's target: from memory, else from ``directory`` (None: not kept on disk), else
    found now and written there unless ``write`` is false."""
    identity = machine_identity()
    digest = identity_digest(identity)
    with _memo_lock:
        known = _memo.get(digest)
        if known is None:
            known = _stored_or_found(directory, identity, digest, write=write)
            _memo[digest] = known
        elif write and directory is not None and (digest, directory) not in _kept:
            # known from another cache folder: keep it in this one too, no search needed
            _stored_or_found(directory, identity, digest, known=known)
        if write and directory is not None:
            _kept.add((digest, directory))
        return known


def settled_target() -> MachineTarget | None:
    """The target this process already knows for the current identity, found nowhere new."""
    digest = identity_digest(machine_identity())
    with _memo_lock:
        return _memo.get(digest)


def forget() -> None:
    """Drop what this process remembers (a later call reads the record again)."""
    with _memo_lock:
        _memo.clear()
        _kept.clear()


def record_path(directory: Path, digest: str) -> Path:
    """Where the record of the identity digested as ``digest`` is kept under ``directory``."""
    return directory / RECORD_DIR / f"cpu-{digest}.json"


def machine_identity() -> dict[str, str]:
    """Everything the target depends on, each part as text; no subprocess, no compile."""
    import torch
    import torch._inductor.config as inductor_config

    cpp = inductor_config.cpp
    return {
        "format": RECORD_FORMAT,
        "machine": f"{sys.platform} {platform.machine()}",
        "cpu": cpu_description(),
        "torch": f"{torch.__version__} {getattr(torch.version, 'git_version', '')}",
        "compiler": compiler_identity(compiler_candidates(cpp.cxx)),
        # what steers Inductor's choice of ISA and architecture flag
        "settings": (
            f"ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY', '')} "
            # each read where this torch has it: cpp.march is newer than torch 2.11
            + " ".join(
                f"{name}={getattr(cpp, name, None)!r}"
                for name in ("march", "simdlen", "vec_isa_ok")
            )
        ),
    }


def identity_digest(identity: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(dict(identity), sort_keys=True).encode()).hexdigest()[:24]


def cpu_description(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The first CPU's vendor, family, model, name and sorted flags; the platform's elsewhere."""
    wanted = ("vendor_id", "cpu family", "model", "model name", "flags", "features", "isa")
    fields: dict[str, str] = {}
    try:
        with cpuinfo.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                if not line.strip():
                    if fields:
                        break  # the first processor's block is enough
                    continue
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name in wanted and name not in fields:
                    fields[name] = value.strip()
    except OSError:
        return f"processor={platform.processor()}"
    for name in ("flags", "features"):
        if name in fields:
            fields[name] = " ".join(sorted(fields[name].split()))
    return "; ".join(f"{name}={fields[name]}" for name in wanted if name in fields)


def compiler_candidates(cxx: object) -> list[str]:
    """The compilers Inductor would try, in order (``None`` in ``cpp.cxx``: conda's g++)."""
    names = cxx if isinstance(cxx, (list, tuple)) else (cxx,)
    return [str(name) for name in names if name]


def compiler_identity(candidates: Sequence[str]) -> str:
    """The first candidate found on the path, as its resolved file with size and mtime."""
    for name in candidates:
        found = shutil.which(name)
        if found is None:
            continue
        resolved = os.path.realpath(found)
        try:
            st = os.stat(resolved)
        except OSError:
            continue
        return f"{name} -> {resolved} size={st.st_size} mtime_ns={st.st_mtime_ns}"
    return "no compiler: " + " ".join(candidates)


def _stored_or_found(
    directory: Path | None,
    identity: dict[str, str],
    digest: str,
    known: MachineTarget | None = None,
    write: bool = True,
) -> MachineTarget:
    """The record under ``directory``, else ``known``, else found now; written when missing.
    Failing to write costs only the search next time (this time's is not run again)."""
    found = known
    if directory is not None:
        path = record_path(directory, digest)
        stored = read_record(path, identity)
        if stored is not None:
            return stored
        if write:
            with contextlib.suppress(Timeout, OSError):
                path.parent.mkdir(mode=0o700, exist_ok=True)
                with FileLock(str(path) + ".lock", timeout=_LOCK_TIMEOUT, mode=0o600):
                    stored = read_record(path, identity)  # another process may have written it
                    if stored is not None:
                        return stored
                    found = found or find_target()
                    write_record(path, identity, found)
                    return found
    return found or find_target()


def read_record(path: Path, identity: Mapping[str, str]) -> MachineTarget | None:
    """The well-formed target of ``identity`` in a small regular file at ``path``, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size > _RECORD_LIMIT:
                return None
            data = json.loads(f.read(_RECORD_LIMIT + 1))
        return _target_from(data, identity)
    except (OSError, ValueError, TypeError, KeyError, RecursionError):
        return None


def write_record(path: Path, identity: Mapping[str, str], target: MachineTarget) -> None:
    """Write the record atomically: a temporary file in the same folder, then a rename."""
    data = {"format": RECORD_FORMAT, "identity": dict(identity), "target": asdict(target)}
    with contextlib.suppress(OSError):
        replace_text(path, json.dumps(data, indent=1, sort_keys=True), sync=True)


def _target_from(data: Any, identity: Mapping[str, str]) -> MachineTarget | None:
    if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT:
        return None
    if data.get("identity") != dict(identity):
        return None
    fields = data["target"]
    texts = ("isa", "isa_flags", "arch_flag", "march")
    lists = ("features", "valid_isas")
    if not isinstance(fields, dict) or set(fields) != set(texts + lists):
        return None
    if not all(isinstance(fields[name], str) for name in texts):
        return None
    if not all(
        isinstance(fields[name], list) and all(isinstance(item, str) for item in fields[name])
        for name in lists
    ):
        return None
    values: dict[str, Any] = {n: tuple(v) if n in lists else v for n, v in fields.items()}
    return MachineTarget(**values)


def find_target() -> MachineTarget:
    """Ask Inductor and the compiler; builds and loads Inductor's ISA test programs."""
    isa, isa_flags, valid = find_isa()
    compiler, arch_flags = _inductor_compiler_and_arch()
    march, features = resolve_arch(compiler, arch_flags) if compiler else ("", ())
    return MachineTarget(isa, isa_flags, " ".join(arch_flags), march, features, valid)


def _inductor_compiler_and_arch() -> tuple[str, list[str]]:
    """The compiler Inductor uses and the architecture flags it passes (``-march=native``)."""
    try:
        from torch._inductor import cpp_builder

        compiler = cpp_builder.get_cpp_compiler()
        arch_cflags = getattr(cpp_builder, "_get_cpu_arch_cflags", None)
        if arch_cflags is not None:
            flags = arch_cflags(compiler)
        else:  # torch 2.11: the architecture flag is one of the optimization flags
            optimization = cpp_builder._get_optimization_cflags(compiler)[0]
            flags = [flag for flag in optimization if flag.startswith(("march=", "mcpu="))]
        return compiler, [f"-{flag}" for flag in flags]
    except Exception:  # no usable compiler: Inductor cannot compile here either
        return "", []


def resolve_arch(compiler: str, arch_flags: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """``compiler``'s resolved ``-march=`` and sorted features for ``arch_flags`` (``-###``)."""
    try:
        listing = subprocess.run(
            [compiler, *arch_flags, "-###", "-E", "-x", "c++", "-"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return "", ()
    return parse_driver_listing(listing.stderr + listing.stdout)


def parse_driver_listing(text: str) -> tuple[str, tuple[str, ...]]:
    """``(march, features)`` from gcc's (``-march=x -mavx2``) or clang's (``-target-cpu x
    -target-feature +avx2``) ``-###`` output; disabled features and tuning are left out."""
    march, features = "", set[str]()
    for line in text.splitlines():
        try:
            tokens = shlex.split(line)
        except ValueError:
            continue
        if not any(t == "-target-cpu" or t.startswith("-march=") for t in tokens):
            continue
        for index, token in enumerate(tokens):
            following = tokens[index + 1] if index + 1 < len(tokens) else ""
            if token.startswith("-march="):
                march = token.partition("=")[2]
            elif token == "-target-cpu":
                march = following
            elif token == "-target-feature" and following.startswith("+"):
                features.add(following[1:])
            elif (
                token.startswith("-m")
                and not token.startswith(("-mno-", "-mtune=", "-march="))
                and "=" not in token
            ):
                features.add(token[2:])
        break  # the first compiler invocation is the one that compiles
    return march, tuple(sorted(features))
