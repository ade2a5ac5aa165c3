"""Opening the fleet's store at startup: the filesystem's options, the keys, and what a
URL the run cannot use becomes.

A missing package, a bad key, credentials in the ini or a protocol fsspec does not know
are usage errors (exit 4); a store that cannot be reached when it is opened (a host that
does not resolve, a server that does not answer) switches the store off for the run with
one problem line, and the run compiles locally. Nothing printed carries a secret: URLs
are masked (:func:`~pytest_aoti.fleet.redact.redact`) and keys are never echoed.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from pytest_aoti.api import AotiUsageError
from pytest_aoti.fleet.feature import parse_utc_time
from pytest_aoti.fleet.guard import RemoteFault, RemoteMissing, bounded
from pytest_aoti.fleet.redact import redact
from pytest_aoti.fleet.signing import Trust, load_trust
from pytest_aoti.fleet.store import Deadlines, RemoteStore, protocol_of

__all__ = ["NOT_BEFORE_ENV", "credential_options", "open_remote", "storage_options"]

NOT_BEFORE_ENV = "PYTEST_AOTI_CACHE_NOT_BEFORE"
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 60.0
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
# words of option names that hold secrets: they belong to the store's credential chain,
# not to a file committed with the tests
_CREDENTIAL_WORDS = frozenset(
    {
        "key",
        "secret",
        "token",
        "password",
        "passwd",
        "credential",
        "credentials",
        "sas",
        "authorization",
        "cookie",
        "bearer",
    }
)
_CREDENTIAL_NAMES = frozenset({"username", "connection_string", "auth", "signature"})


def credential_options(options: Any, where: str = "") -> list[str]:
    """Dotted names of every option nested in ``options`` that holds a credential
    (``client_kwargs.aws_secret_access_key``); ``endpoint_url`` and the like are not."""
    found: list[str] = []
    if isinstance(options, Mapping):
        for name, value in options.items():
            dotted = f"{where}.{name}" if where else str(name)
            # AccountKey, aws-secret, client_secret: the words of any spelling
            spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(name)).lower()
            words = set(re.split(r"[_\-\s.]+", spaced))
            if words & _CREDENTIAL_WORDS or str(name).lower() in _CREDENTIAL_NAMES:
                found.append(dotted)
            else:
                found += credential_options(value, dotted)
    elif isinstance(options, (list, tuple)):
        for number, value in enumerate(options):
            found += credential_options(value, f"{where}[{number}]")
    return found


def storage_options(protocol: str, ini_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Options of the protocol's filesystem: fsspec's configuration (its config files and
    ``FSSPEC_<PROTOCOL>_<OPTION>`` variables, read now), then the ini JSON object, over
    bounded timeouts set by this plugin."""
    import fsspec.config  # optional (the remote extra): open_remote checks it is there

    conf: dict[str, dict[str, Any]] = {}
    fsspec.config.set_conf_files(fsspec.config.conf_dir, conf)
    fsspec.config.set_conf_env(conf)
    options = {**_timeouts(protocol), **conf.get(protocol, {}), **dict(ini_options or {})}
    if protocol in ("s3", "s3a"):
        config = {**_timeouts(protocol)["config_kwargs"], **options.get("config_kwargs", {})}
        options["config_kwargs"] = config
    return options


def _timeouts(protocol: str) -> dict[str, Any]:
    """Explicit connect/read timeouts and few retries for the clients that take them
    (the store's own deadlines bound every call of every protocol besides)."""
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
        import aiohttp  # optional: fsspec's http filesystem needs it

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
    not_before: float | None = None,
    deadlines: Deadlines | None = None,
) -> RemoteStore:
    """The remote tier at ``url``. A missing package, a bad key, credentials in the ini or
    an unknown protocol is a ``pytest.UsageError`` that says what to do; a store that
    cannot be opened is returned switched off, with one problem line."""
    shown = redact(url)
    protocol = protocol_of(url)
    secrets = credential_options(ini_options or {})
    if secrets:
        raise pytest.UsageError(
            f"ini option aoti_cache_storage_options holds credentials ({', '.join(secrets)}): "
            "remove them and use the store's usual credential chain (environment variables, "
            "instance roles, its config files)"
        )
    try:  # fsspec is optional (the remote extra)
        import fsspec
    except ImportError:
        raise pytest.UsageError(
            f"--aoti-cache-url needs the 'fsspec' package: {AotiUsageError.install_hint('remote')}"
        ) from None
    try:
        trust = load_trust_for(ini_trusted)
        not_before = not_before_time(not_before)
        options = storage_options(protocol, ini_options)
        fsspec.get_filesystem_class(protocol)
    except AotiUsageError as error:
        raise pytest.UsageError(redact(str(error))) from None
    except ImportError as error:
        package, extra = _PROTOCOL_PACKAGES.get(protocol, (str(error), "remote"))
        raise pytest.UsageError(
            f"--aoti-cache-url={shown} needs the '{package}' package: "
            f"{AotiUsageError.install_hint(extra)} (or pip install {package})"
        ) from None
    except (ValueError, TypeError) as error:
        raise pytest.UsageError(f"--aoti-cache-url={shown}: {redact(str(error))}") from None
    deadlines = deadlines or Deadlines()
    try:
        # some filesystems connect when made (ftp, sftp): bounded like any other call
        fs, root = bounded(lambda: fsspec.core.url_to_fs(url, **options), seconds=deadlines.call)
    except (RemoteFault, RemoteMissing) as fault:
        on_problem(
            f"pytest-aoti remote cache {shown}: could not open it ({fault}); off for this run, "
            "compiled locally"
        )
        fs, root = None, ""
    return RemoteStore(
        url,
        fs,
        root,
        mode=mode,
        trust=trust,
        on_problem=on_problem,
        not_before=not_before,
        deadlines=deadlines,
    )


def not_before_time(given: float | None) -> float | None:
    """The ini/command-line time, else ``PYTEST_AOTI_CACHE_NOT_BEFORE``'s (a usage error
    when that is no UTC time)."""
    text = os.environ.get(NOT_BEFORE_ENV, "").strip()
    if given is not None or not text:
        return given
    try:
        return parse_utc_time(text)
    except argparse.ArgumentTypeError as error:
        raise AotiUsageError(f"{NOT_BEFORE_ENV}: {error}") from None


def load_trust_for(ini_trusted: Sequence[str]) -> Trust:
    return load_trust(ini_trusted)
