"""The remote store's manifest: what a publisher signs, and what a reader accepts.

A manifest is read whole only when it is a regular file of at most :data:`MANIFEST_LIMIT`
bytes (checked by the store before it reads); here it is parsed with its nesting bounded,
its format and entry format version checked, its signatures list validated element by
element (junk beside a valid trusted signature is ignored), and the signed entry's fields
checked. Each refusal says whether a trusted publisher may replace the entry
(:attr:`Verdict.repairable`): a damaged, outdated or revoked entry may be; one signed by a
key this job does not trust never is, since other readers may trust it.
"""

from __future__ import annotations

import datetime
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_aoti.fleet.signing import Trust

__all__ = [
    "ENTRY_FORMAT_VERSION",
    "MANIFEST_FORMAT",
    "MANIFEST_LIMIT",
    "Verdict",
    "make_manifest",
    "read_manifest",
]

MANIFEST_FORMAT = "pytest-aoti-remote-1"
ENTRY_FORMAT_VERSION = 2
"""2: signatures cover a domain-separation prefix (:data:`signing.SIGNED_DOMAIN`)."""
MANIFEST_LIMIT = 1 << 20
"""Bytes a manifest may have; a larger one is not read past this."""
MAX_NESTING = 32
"""Depth of lists and objects a manifest may have (a publisher's is under 10)."""
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Verdict:
    """A manifest read: the trusted entry and its signer, or why it is refused."""

    entry: dict[str, Any] | None = None
    publisher: str = ""
    reason: str = ""
    repairable: bool = False
    """Whether a publisher with a trusted key may replace the entry."""


def _no_constant(name: str) -> Any:
    """NaN and Infinity are no JSON a publisher writes: the manifest is damaged."""
    raise ValueError(f"{name} in a manifest")


def _refused(reason: str, repairable: bool = True) -> Verdict:
    return Verdict(reason=reason, repairable=repairable)


def _depth_within(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists and objects at most ``limit`` deep (no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return True


def read_manifest(raw: bytes, key: str, trust: Trust, not_before: float | None) -> Verdict:
    """The verdict on ``raw``, the manifest found at ``key``."""
    if len(raw) > MANIFEST_LIMIT:
        return _refused(f"its manifest is larger than {MANIFEST_LIMIT // 2**20} MiB")
    try:
        manifest = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        return _refused("its manifest nests deeper than this version reads")
    except ValueError:
        return _refused("its manifest is not JSON (damaged or half-written)")
    if not _depth_within(manifest, MAX_NESTING):
        return _refused("its manifest nests deeper than this version reads")
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        return _refused(f"its manifest is not of format {MANIFEST_FORMAT}")
    entry = manifest.get("entry")
    if not isinstance(entry, dict):
        return _refused("its manifest has no entry")
    version = entry.get("format_version")
    if version != ENTRY_FORMAT_VERSION:
        # an older or damaged entry is replaced once; a newer release's is left to its readers
        newer = type(version) is int and version > ENTRY_FORMAT_VERSION
        return _refused(
            f"its entry is of format version {version!r}, this version reads "
            f"{ENTRY_FORMAT_VERSION} (entries of older versions are compiled again once)",
            repairable=not newer,
        )
    check = trust.check(entry, manifest.get("signatures"))
    if check.signer is None:
        # a well-formed signature by a key not trusted here may be trusted elsewhere
        return _refused(check.reason, repairable=not check.foreign)
    problem = _entry_problem(entry, key)
    if problem is not None:
        return _refused(problem)
    if not_before is not None and entry["created"] < not_before:
        return _refused(
            f"it was signed at {_iso(entry['created'])}, before the cache's not-before time "
            f"{_iso(not_before)}"
        )
    return Verdict(entry=entry, publisher=check.signer)


def _entry_problem(entry: Mapping[str, Any], key: str) -> str | None:
    """Why a signed entry is unusable; signed, so these are a trusted publisher's own
    values, checked all the same."""
    sha = entry.get("sha256")
    if entry.get("key") != key:
        return f"it is signed for key {str(entry.get('key'))[:64]!r}"
    if not isinstance(sha, str) or _SHA256.fullmatch(sha) is None:
        return "its entry has no sha256"
    if entry.get("package") != f"package-{sha}.pt2":
        return "its entry names an unexpected package file"
    size = entry.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return "its entry has no size"
    created = entry.get("created")
    if not isinstance(created, (int, float)) or isinstance(created, bool):
        return "its entry has no creation time"
    if not isinstance(entry.get("caller"), dict):
        return "its entry has no metadata"
    return None


def make_manifest(key: str, sha: str, size: int, caller: Mapping[str, Any], trust: Trust) -> bytes:
    """A signed manifest naming ``package-<sha>.pt2``, created now."""
    entry = {
        "format_version": ENTRY_FORMAT_VERSION,
        "key": key,
        "sha256": sha,
        "size": size,
        "package": f"package-{sha}.pt2",
        "created": round(time.time(), 3),
        "caller": json.loads(json.dumps(dict(caller), allow_nan=False)),
    }
    manifest = {"format": MANIFEST_FORMAT, "entry": entry, "signatures": [trust.sign(entry)]}
    return json.dumps(manifest, indent=1, sort_keys=True).encode()


def _iso(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
