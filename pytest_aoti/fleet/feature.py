"""The CI fleet, declared: the remote store's session options (see
:class:`~pytest_aoti.api.Feature`). Pure data without torch."""

from __future__ import annotations

import argparse
import datetime
import json
from dataclasses import dataclass
from typing import Any

from pytest_aoti.api import Feature, Option, ValueKind, session_field


def parse_storage_options(text: str) -> dict[str, Any]:
    """A JSON object of a store's options; a mistake is shown by position, never by value
    (the text may hold a credential, which is refused later)."""
    try:
        value = json.loads(text)
    except ValueError as error:
        where = getattr(error, "msg", "not JSON")
        line, column = getattr(error, "lineno", "?"), getattr(error, "colno", "?")
        raise argparse.ArgumentTypeError(
            f"expected a JSON object ({where} at line {line} column {column})"
        ) from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, not a {type(value).__name__}")
    return value


def parse_cache_url(text: str) -> str:
    """An fsspec URL such as ``s3://bucket/prefix`` or ``file:///shared/aoti``."""
    url = str(text).strip()
    if "://" not in url or not url.split("://", 1)[1].strip("/"):
        # the value is not echoed: a mistyped URL may still carry a password
        raise argparse.ArgumentTypeError(
            "expected an fsspec URL such as s3://bucket/prefix or file:///path"
        )
    return url


def parse_utc_time(text: str) -> float:
    """An ISO 8601 UTC time such as ``2026-12-01T12:00:00Z``, as seconds since the epoch."""
    value = str(text).strip()
    try:
        moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        moment = None
    if moment is None or moment.utcoffset() != datetime.timedelta(0):
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 UTC time such as 2026-12-01T12:00:00Z, got {value!r}"
        )
    return moment.timestamp()


def parse_path_list(text: str) -> tuple[str, ...]:
    """Paths one per line (or separated by spaces)."""
    return tuple(part for part in str(text).split() if part)


@dataclass(frozen=True)
class FleetSettings:
    """The session options of the fleet's remote store."""

    cache_url: str | None = session_field(
        Option(
            "aoti-cache-url",
            parse_cache_url,
            None,
            "fsspec URL of a remote cache shared by a CI fleet, behind the local cache "
            "(s3://bucket/prefix, gs://..., az://..., file:///..., read-only https://...); its "
            "entries must be signed (docs: the CI fleet store). Default: none.",
            secret=True,
        )
    )
    cache_remote: str = session_field(
        Option(
            "aoti-cache-remote",
            ValueKind.CACHE_MODE.parse,
            "readwrite",
            "What the run does with --aoti-cache-url: off, read or readwrite (publishes only "
            "with a signing key). Default: readwrite.",
        )
    )
    cache_storage_options: dict[str, Any] | None = session_field(
        Option(
            "aoti-cache-storage-options",
            parse_storage_options,
            None,
            "Options of the remote cache's fsspec filesystem, as a JSON object (ini only), over "
            "fsspec's own config and FSSPEC_<PROTOCOL>_<OPTION> variables. No credentials here: "
            "use the store's usual credential chain. Default: none.",
            cli=False,
            secret=True,
        )
    )
    cache_trusted_keys: tuple[str, ...] = session_field(
        Option(
            "aoti-cache-trusted-keys",
            parse_path_list,
            (),
            "PEM files of the Ed25519 public keys whose remote cache entries are loaded, one per "
            "line (ini only), besides PYTEST_AOTI_CACHE_TRUSTED_KEYS. Default: none.",
            cli=False,
        )
    )
    cache_not_before: float | None = session_field(
        Option(
            "aoti-cache-not-before",
            parse_utc_time,
            None,
            "Remote cache entries signed before this ISO 8601 UTC time (2026-12-01T12:00:00Z) are "
            "refused and replaced (also PYTEST_AOTI_CACHE_NOT_BEFORE). Default: none.",
        )
    )


FLEET = Feature(
    "fleet",
    "The CI fleet: a signed remote cache behind the local one, and reports merged across shards",
    settings=FleetSettings,
)
