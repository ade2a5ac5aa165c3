"""A remote tier behind the local artifact store, shared by a CI fleet through fsspec.

Layout under the URL (``s3://bucket/prefix``, ``gs://…``, ``az://…``, ``file:///…``;
``https://…`` is read-only)::

    URL/v1/<key>/package-<sha256>.pt2   the package: immutable, named by its checksum
    URL/v1/<key>/manifest.json          the signed entry, written last

Publishing uploads the package first and the manifest last, so an interrupted upload
leaves no manifest, and a manifest names exactly one package by its checksum: two machines
publishing the same key at once (AOTI packages are not byte-identical across compiles)
each upload their own package, and the last manifest wins whole. A reader verifies the
manifest's Ed25519 signature (:mod:`pytest_aoti.compiling.signing`) before it downloads
anything, and the package's size and sha256 before it hands it out.

Faults never fail a test: every call has bounded timeouts and few retries, a problem is
reported once (to ``on_problem``) and the caller compiles; a store that fails
:data:`SWITCH_OFF_AFTER` times in a row is switched off for the rest of the session. Test
runs never delete anything from the store; retention is the store's own lifecycle rules.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pytest_aoti.compiling.signing import Trust
from pytest_aoti.errors import install_hint

__all__ = [
    "REMOTE_MODES",
    "RemoteFetch",
    "RemoteStats",
    "RemoteStore",
    "open_remote",
]

REMOTE_MODES = ("off", "read", "readwrite")
LAYOUT_VERSION = 1
MANIFEST_FORMAT = "pytest-aoti-remote-1"
MANIFEST_NAME = "manifest.json"
SWITCH_OFF_AFTER = 3
"""Failed calls in a row after which the store is off for the session."""
ATTEMPTS = 2
"""Tries of one call: a transient error gets one retry."""
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 60.0
_MANIFEST_LIMIT = 1 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 20
READ_ONLY_PROTOCOLS = frozenset({"http", "https"})
# protocol -> (the package fsspec needs for it, the extra of pytest-aoti that brings it)
_PROTOCOL_PACKAGES = {
    "s3": ("s3fs", "s3"),
    "s3a": ("s3fs", "s3"),
    "gs": ("gcsfs", "gcs"),
    "gcs": ("gcsfs", "gcs"),
    "az": ("adlfs", "azure"),
    "abfs": ("adlfs", "azure"),
    "abfss": ("adlfs", "azure"),
    "http": ("aiohttp", "remote"),
    "https": ("aiohttp", "remote"),
}
# storage options that hold secrets: they belong to the store's credential chain, not to a
# file committed with the tests
_CREDENTIAL_OPTIONS = frozenset(
    {
        "key",
        "secret",
        "token",
        "password",
        "username",
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
        "account_key",
        "sas_token",
        "connection_string",
        "client_secret",
    }
)
_T = TypeVar("_T")


@dataclass
class RemoteStats:
    """What one process did with the remote store; merged across xdist workers."""

    hits: int = 0
    misses: int = 0
    rejected: int = 0
    """Entries found but not loaded: unsigned, untrusted, tampered or damaged."""
    uploads: int = 0
    bytes_down: int = 0
    bytes_up: int = 0
    seconds_down: float = 0.0
    seconds_up: float = 0.0
    failures: int = 0
    """Calls that failed after their retries (unreachable, slow or denying store)."""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["seconds_down"] = round(self.seconds_down, 3)
        data["seconds_up"] = round(self.seconds_up, 3)
        return data

    def merge(self, other: Mapping[str, Any]) -> None:
        for name in self.__dataclass_fields__:
            value = other.get(name, 0)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                setattr(self, name, getattr(self, name) + value)


@dataclass(frozen=True)
class RemoteFetch:
    """A package downloaded from the store and verified, and its signed metadata."""

    package_path: Path
    caller: dict[str, Any]
    """The metadata the publisher's registry recorded (signature maps, compile time)."""
    publisher: str
    """The key id that signed the entry."""
    seconds: float


class _Failed(Exception):
    """A call failed after its retries; already reported."""


class RemoteStore:
    """The fleet's store at ``url``: lookups verify signatures, compiles publish.

    ``fs`` is an fsspec filesystem and ``root`` the path in it that ``url`` names.
    """

    def __init__(
        self,
        url: str,
        fs: Any,
        root: str,
        *,
        mode: str,
        trust: Trust,
        on_problem: Callable[[str], None],
    ) -> None:
        if mode not in REMOTE_MODES:
            raise ValueError(f"remote cache mode must be one of {REMOTE_MODES}, not {mode!r}")
        self.url = url
        self.mode = mode
        self.trust = trust
        self.stats = RemoteStats()
        self._fs = fs
        self._root = root.rstrip("/")
        self._on_problem = on_problem
        self._lock = threading.Lock()
        self._failures_in_a_row = 0
        self._off = mode == "off"
        self._refused: set[str] = set()
        """Keys whose entry was found but not trusted: never published over."""
        protocol = protocol_of(url)
        self.read_only_protocol = protocol in READ_ONLY_PROTOCOLS

    def __repr__(self) -> str:
        return f"RemoteStore({self.url!r}, mode={self.mode!r}, off={self._off})"

    @property
    def readable(self) -> bool:
        """Whether a lookup can hit: on, not switched off, and some key is trusted."""
        return not self._off and self.trust.can_verify

    @property
    def writable(self) -> bool:
        """Whether a compile is published: readwrite, a signing key, a writable protocol."""
        return (
            not self._off
            and self.mode == "readwrite"
            and self.trust.can_sign
            and not self.read_only_protocol
        )

    def _entry_dir(self, key: str) -> str:
        return f"{self._root}/v{LAYOUT_VERSION}/{key}"

    # -- lookup ------------------------------------------------------------------------

    def fetch(self, key: str, destination: Path) -> RemoteFetch | None:
        """Download and verify ``key``'s package to ``destination``; None on a miss, a
        rejected entry or a fault (each reported once)."""
        if not self.readable:
            return None
        started = time.perf_counter()
        try:
            raw = self._call(
                "read the manifest of " + key[:12],
                self._fs.cat_file,
                f"{self._entry_dir(key)}/{MANIFEST_NAME}",
            )
        except FileNotFoundError:
            with self._lock:
                self.stats.misses += 1
            return None
        except _Failed:
            return None
        try:
            entry, publisher = self._verified_entry(key, raw)
        except ValueError as error:
            self.reject(key, str(error))
            return None
        package = f"{self._entry_dir(key)}/{entry['package']}"
        try:
            self._call("download " + key[:12], self._download, package, destination)
        except FileNotFoundError:
            self.reject(key, "its package is missing")
            return None
        except _Failed:
            destination.unlink(missing_ok=True)
            return None
        problem = _package_problem(destination, entry)
        if problem is not None:
            destination.unlink(missing_ok=True)
            self.reject(key, problem)
            return None
        seconds = time.perf_counter() - started
        with self._lock:
            self.stats.hits += 1
            self.stats.bytes_down += int(entry["size"])
            self.stats.seconds_down += seconds
        return RemoteFetch(destination, dict(entry["caller"]), publisher, seconds)

    def _verified_entry(self, key: str, raw: bytes) -> tuple[dict[str, Any], str]:
        """The signed entry of a manifest; ``ValueError`` says why it must not be used."""
        if len(raw) > _MANIFEST_LIMIT:
            raise ValueError("its manifest is larger than 1 MiB")
        try:
            manifest = json.loads(raw)
        except ValueError:
            raise ValueError("its manifest is not JSON (damaged or half-written)") from None
        if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"its manifest is not of format {MANIFEST_FORMAT}")
        entry = manifest.get("entry")
        if not isinstance(entry, dict):
            raise ValueError("its manifest has no entry")
        problem = self.trust.verify(entry, manifest.get("signatures"))
        if problem is not None:
            raise ValueError(problem)
        # signed, so these are the publisher's own values; still check they are sane
        sha = entry.get("sha256")
        if entry.get("key") != key:
            raise ValueError(f"it is signed for key {entry.get('key')!r}")
        if not isinstance(sha, str) or _SHA256.fullmatch(sha) is None:
            raise ValueError("its entry has no sha256")
        if entry.get("package") != f"package-{sha}.pt2":
            raise ValueError("its entry names an unexpected package file")
        size = entry.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError("its entry has no size")
        if not isinstance(entry.get("caller"), dict):
            raise ValueError("its entry has no metadata")
        signer = next(
            s["key_id"] for s in manifest["signatures"] if s.get("key_id") in self.trust.trusted
        )
        return entry, str(signer)

    def _download(self, remote_path: str, destination: Path) -> None:
        destination.parent.mkdir(parents=True, exist_ok=True)
        partial = destination.with_name(f".{destination.name}.{os.getpid()}.part")
        try:
            self._fs.get_file(remote_path, str(partial))
            os.replace(partial, destination)
        finally:
            partial.unlink(missing_ok=True)

    def reject(self, key: str, reason: str, *, fetched: bool = False) -> None:
        """Count and report an entry that must not be used; it is never published over.
        ``fetched``: it was downloaded (and counted as a hit) before it proved unusable."""
        with self._lock:
            self.stats.rejected += 1
            self.stats.hits -= fetched
            self._refused.add(key)
        self._problem(
            f"pytest-aoti remote cache entry {key} at {self.url} not loaded: {reason}; "
            "compiled locally"
        )

    # -- publish -----------------------------------------------------------------------

    def publish(self, key: str, package_file: Path, caller: Mapping[str, Any]) -> bool:
        """Upload a freshly compiled package and its signed manifest; True when published.

        Nothing is published over an entry this session found but did not trust.
        """
        if not self.writable or key in self._refused:
            return False
        started = time.perf_counter()
        sha, size = _sha256_and_size(package_file)
        name = f"package-{sha}.pt2"
        entry = {
            "format_version": LAYOUT_VERSION,
            "key": key,
            "sha256": sha,
            "size": size,
            "package": name,
            "created": round(time.time(), 3),
            "caller": json.loads(json.dumps(dict(caller), allow_nan=False)),
        }
        manifest = {
            "format": MANIFEST_FORMAT,
            "entry": entry,
            "signatures": [self.trust.sign(entry)],
        }
        data = json.dumps(manifest, indent=1, sort_keys=True).encode()
        entry_dir = self._entry_dir(key)
        try:
            # a local or mounted directory needs its folders; object stores ignore this
            self._call("create " + key[:12], self._makedirs, entry_dir, missing_is_miss=False)
            # the immutable package first, the manifest that names it last
            self._call(
                "upload " + key[:12],
                self._fs.put_file,
                str(package_file),
                f"{entry_dir}/{name}",
                missing_is_miss=False,
            )
            self._call(
                "write the manifest of " + key[:12],
                self._fs.pipe_file,
                f"{entry_dir}/{MANIFEST_NAME}",
                data,
                missing_is_miss=False,
            )
        except _Failed:
            return False
        with self._lock:
            self.stats.uploads += 1
            self.stats.bytes_up += size + len(data)
            self.stats.seconds_up += time.perf_counter() - started
        return True

    # -- faults ------------------------------------------------------------------------

    def _makedirs(self, path: str) -> None:
        # only a directory tree needs folders; on an object store makedirs creates buckets
        protocols = self._fs.protocol
        if "file" in (protocols if isinstance(protocols, (tuple, list)) else (protocols,)):
            self._fs.makedirs(path, exist_ok=True)

    def _call(
        self, what: str, function: Callable[..., _T], *args: Any, missing_is_miss: bool = True
    ) -> _T:
        """Run one store call with a retry; a miss (``FileNotFoundError``) passes through
        where ``missing_is_miss``, any other failure is reported and raised as
        :class:`_Failed`."""
        if self._off:
            raise _Failed
        error: BaseException | None = None
        for attempt in range(ATTEMPTS):
            try:
                result = function(*args)
            except FileNotFoundError as missing:
                if not missing_is_miss:
                    error = missing
                    break
                self._succeeded()
                raise
            except PermissionError as denied:  # retrying a denial changes nothing
                error = denied
                break
            except Exception as failed:  # any client's error: a fault, never a test failure
                error = failed
                if attempt + 1 < ATTEMPTS:
                    time.sleep(0.2 * (attempt + 1))
                continue
            self._succeeded()
            return result
        assert error is not None
        self._failed(what, error)
        raise _Failed

    def _succeeded(self) -> None:
        with self._lock:
            self._failures_in_a_row = 0

    def _failed(self, what: str, error: BaseException) -> None:
        first = (str(error).splitlines() or [""])[0][:200] or type(error).__name__
        with self._lock:
            self.stats.failures += 1
            self._failures_in_a_row += 1
            switch_off = self._failures_in_a_row >= SWITCH_OFF_AFTER and not self._off
            if switch_off:
                self._off = True
        self._problem(
            f"pytest-aoti remote cache {self.url}: could not {what} "
            f"({type(error).__name__}: {first}); compiled locally"
        )
        if switch_off:
            self._problem(
                f"pytest-aoti remote cache {self.url} switched off for the rest of the session "
                f"after {SWITCH_OFF_AFTER} failed calls in a row"
            )

    def report(self, message: str) -> None:
        """Report a problem worked around by compiling locally; never raises."""
        self._problem(message)

    def _problem(self, message: str) -> None:
        try:
            self._on_problem(message)
        except Exception:  # reporting must never fail a compile
            pass


def protocol_of(url: str) -> str:
    """The fsspec protocol of ``url`` (``file`` for a bare path)."""
    return url.split("://", 1)[0].lower() if "://" in url else "file"


def _sha256_and_size(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _package_problem(path: Path, entry: Mapping[str, Any]) -> str | None:
    try:
        sha, size = _sha256_and_size(path)
    except OSError as error:
        return f"its download could not be read ({error.strerror or error})"
    if size != entry["size"]:
        return f"its package has {size} bytes, the signed entry says {entry['size']}"
    if sha != entry["sha256"]:
        return "its package does not match the signed checksum (tampered or damaged)"
    return None


# --- opening ---------------------------------------------------------------------------


def storage_options(protocol: str, ini_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Options of the protocol's filesystem: fsspec's configuration (its config files and
    ``FSSPEC_<PROTOCOL>_<OPTION>`` variables, read now), then the ini JSON object, over
    bounded timeouts set by this plugin."""
    import fsspec.config

    conf: dict[str, dict[str, Any]] = {}
    fsspec.config.set_conf_files(fsspec.config.conf_dir, conf)
    fsspec.config.set_conf_env(conf)
    options = {**_timeouts(protocol), **conf.get(protocol, {}), **dict(ini_options or {})}
    if protocol in ("s3", "s3a"):
        config = {**_timeouts(protocol)["config_kwargs"], **options.get("config_kwargs", {})}
        options["config_kwargs"] = config
    return options


def _timeouts(protocol: str) -> dict[str, Any]:
    """Explicit connect/read timeouts and few retries for the clients that take them."""
    if protocol in ("s3", "s3a"):
        return {
            "config_kwargs": {
                "connect_timeout": CONNECT_TIMEOUT,
                "read_timeout": READ_TIMEOUT,
                "retries": {"max_attempts": 2, "mode": "standard"},
            },
            "skip_instance_cache": True,
        }
    if protocol in ("gs", "gcs"):
        return {"timeout": READ_TIMEOUT, "skip_instance_cache": True}
    if protocol in ("http", "https"):
        import aiohttp

        timeout = aiohttp.ClientTimeout(sock_connect=CONNECT_TIMEOUT, sock_read=READ_TIMEOUT)
        return {"client_kwargs": {"timeout": timeout}, "skip_instance_cache": True}
    return {}


def open_remote(
    url: str,
    *,
    mode: str,
    ini_options: Mapping[str, Any] | None,
    ini_trusted: Sequence[str],
    on_problem: Callable[[str], None],
) -> RemoteStore:
    """The remote tier at ``url``; a missing package or a bad key is a ``pytest.UsageError``
    that says what to do."""
    from pytest_aoti.errors import AotiUsageError

    protocol = protocol_of(url)
    secrets = sorted(_CREDENTIAL_OPTIONS & set(ini_options or {}))
    if secrets:
        raise pytest.UsageError(
            f"ini option aoti_cache_storage_options holds credentials ({', '.join(secrets)}): "
            "remove them and use the store's usual credential chain (environment variables, "
            "instance roles, its config files)"
        )
    try:
        import fsspec
    except ImportError:
        raise pytest.UsageError(
            f"--aoti-cache-url needs the 'fsspec' package: {install_hint('remote')}"
        ) from None
    try:
        trust = load_trust_for(ini_trusted)
        options = storage_options(protocol, ini_options)
        fs, root = fsspec.core.url_to_fs(url, **options)
    except AotiUsageError as error:
        raise pytest.UsageError(str(error)) from None
    except ImportError as error:
        package, extra = _PROTOCOL_PACKAGES.get(protocol, (str(error), "remote"))
        raise pytest.UsageError(
            f"--aoti-cache-url={url} needs the '{package}' package: "
            f"{install_hint(extra)} (or pip install {package})"
        ) from None
    except (ValueError, TypeError) as error:
        raise pytest.UsageError(f"--aoti-cache-url={url}: {error}") from None
    return RemoteStore(url, fs, root, mode=mode, trust=trust, on_problem=on_problem)


def load_trust_for(ini_trusted: Sequence[str]) -> Trust:
    from pytest_aoti.compiling.signing import load_trust

    return load_trust(ini_trusted)
