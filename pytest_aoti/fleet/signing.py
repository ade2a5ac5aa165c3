"""Ed25519 signatures of remote cache entries, and the rule of whom to trust.

A remote store of compiled packages is a trust boundary: whoever can write to it can run
native code on every machine that loads from it. So an entry is loaded only when its
manifest carries a signature, by a trusted key, over the entry's canonical metadata
(content key, package checksum and size, and everything the checks read from the
metadata). Neither the package nor the metadata can then be swapped.

Keys come from the environment and the ini file:

- ``PYTEST_AOTI_CACHE_SIGNING_KEY``: the publisher's private key, as PEM text or a path to
  a PEM file (PKCS#8, unencrypted). Without it nothing is published.
- ``PYTEST_AOTI_CACHE_TRUSTED_KEYS``: paths of PEM files of public keys (every key in a
  file is trusted), separated by ``os.pathsep``; plus the ini list
  ``aoti_cache_trusted_keys``. A publisher trusts its own key. Without any trusted key
  nothing is loaded.

A key that cannot be used is a usage error naming the variable and the form it needs,
never its value: the value may be a secret.

``cryptography`` is imported only when a key is loaded or a signature checked.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_aoti.api import AotiUsageError

__all__ = [
    "SIGNED_DOMAIN",
    "SIGNING_KEY_ENV",
    "SignatureCheck",
    "TRUSTED_KEYS_ENV",
    "Trust",
    "canonical_bytes",
    "generate_key_pair",
    "load_trust",
]

SIGNING_KEY_ENV = "PYTEST_AOTI_CACHE_SIGNING_KEY"
TRUSTED_KEYS_ENV = "PYTEST_AOTI_CACHE_TRUSTED_KEYS"
SIGNED_DOMAIN = b"pytest-aoti remote cache entry, format 2\n"
"""What the signed bytes start with: a signature made for anything else never verifies."""
MAX_SIGNATURES = 16
"""Elements of a manifest's signatures list that are looked at."""
_KEY_ID = re.compile(r"[0-9a-f]{16}")
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", re.DOTALL)


def canonical_bytes(document: Mapping[str, Any]) -> bytes:
    """The one byte string a signature covers: sorted keys, no whitespace, ASCII only."""
    return json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


def signed_bytes(document: Mapping[str, Any]) -> bytes:
    """The bytes a signature covers: :data:`SIGNED_DOMAIN`, then the canonical bytes."""
    return SIGNED_DOMAIN + canonical_bytes(document)


@dataclass(frozen=True)
class SignatureCheck:
    """A signatures list checked: the trusted key that signed, or why none did."""

    signer: str | None
    reason: str = ""
    foreign: bool = False
    """A well-formed signature by a key not trusted here is among them."""


def _crypto() -> Any:
    try:  # cryptography is optional (the remote extra): imported on first use
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise AotiUsageError(
            f"signed remote cache entries need the 'cryptography' package: {AotiUsageError.install_hint('remote')}"
        ) from None
    return ed25519


def _serialization() -> Any:
    _crypto()  # cryptography is optional: a usage error where it is missing
    from cryptography.hazmat.primitives import serialization

    return serialization


def key_id(public_key: Any) -> str:
    """Short name of a public key: the first 16 hex digits of sha256 of its raw bytes."""
    serialization = _serialization()
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


@dataclass(frozen=True)
class Trust:
    """The signing key of this job (if any) and the public keys it accepts, by key id."""

    signing_key: Any = None
    """An ``Ed25519PrivateKey``, or None: this job publishes nothing."""
    trusted: Mapping[str, Any] = field(default_factory=dict)
    """``Ed25519PublicKey`` objects by :func:`key_id`; the signing key's own included."""

    @property
    def can_sign(self) -> bool:
        return self.signing_key is not None

    @property
    def can_verify(self) -> bool:
        return bool(self.trusted)

    @property
    def signing_key_id(self) -> str | None:
        if self.signing_key is None:
            return None
        return key_id(self.signing_key.public_key())

    def sign(self, document: Mapping[str, Any]) -> dict[str, str]:
        """``{"key_id": ..., "ed25519": base64 signature}`` of ``document``'s signed bytes."""
        if self.signing_key is None:
            raise ValueError("no signing key: this job publishes nothing")
        signature = self.signing_key.sign(signed_bytes(document))
        return {
            "key_id": key_id(self.signing_key.public_key()),
            "ed25519": base64.b64encode(signature).decode("ascii"),
        }

    def verify(self, document: Mapping[str, Any], signatures: Any) -> str | None:
        """Why ``document`` is not signed by a trusted key, or None when it is."""
        check = self.check(document, signatures)
        return None if check.signer is not None else check.reason

    def check(self, document: Mapping[str, Any], signatures: Any) -> SignatureCheck:
        """Which trusted key signed ``document``: every element of ``signatures`` is
        validated and junk is skipped, so a valid trusted signature beside junk counts."""
        if not isinstance(signatures, list) or not signatures:
            return SignatureCheck(None, "it carries no signature")
        from cryptography.exceptions import InvalidSignature  # optional, as in _crypto()

        payload = signed_bytes(document)
        failed: list[str] = []
        foreign: list[str] = []
        for signature in signatures[:MAX_SIGNATURES]:
            parsed = _signature_of(signature)
            if parsed is None:
                continue
            signer, raw = parsed
            public = self.trusted.get(signer)
            if public is None:
                foreign.append(signer)
                continue
            try:
                public.verify(raw, payload)
            except (InvalidSignature, ValueError, TypeError):
                failed.append(signer)
                continue
            return SignatureCheck(signer)
        if failed:
            reason = f"its signature by key {failed[0]} does not verify"
        elif foreign:
            reason = f"it is signed by key(s) {', '.join(foreign)}, none of them trusted here"
        else:
            reason = "it carries no well-formed signature"
        return SignatureCheck(None, reason, foreign=bool(foreign))


def _signature_of(signature: Any) -> tuple[str, bytes] | None:
    """``(key id, 64 signature bytes)`` of one element of a signatures list; None for junk."""
    if not isinstance(signature, dict):
        return None
    signer, encoded = signature.get("key_id"), signature.get("ed25519")
    if not isinstance(signer, str) or _KEY_ID.fullmatch(signer) is None:
        return None
    if not isinstance(encoded, str) or len(encoded) > 128:
        return None
    try:
        raw = base64.b64decode(encoded, validate=True)
    except ValueError:
        return None
    return (signer, raw) if len(raw) == 64 else None


def _read_pem(text_or_path: str, what: str, form: str) -> bytes:
    """PEM bytes from PEM text or a path; never echoes the value, which may be a secret."""
    text = text_or_path.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1].strip()  # quoted where the secret was stored
    if text.startswith("-----BEGIN"):
        return text.encode()
    path = Path(text).expanduser() if "\n" not in text and len(text) < 4096 else None
    try:
        if path is None or not path.is_file():
            raise FileNotFoundError
        return path.read_bytes()
    except OSError:
        raise AotiUsageError(
            f"{what} holds neither PEM text nor the path of a readable file; {form} "
            "(a base64-encoded key must be decoded into PEM first)"
        ) from None


_PRIVATE_FORM = (
    "give an unencrypted PKCS#8 PEM Ed25519 private key or its path "
    "(make one with `python -m pytest_aoti keygen PRIVATE.pem PUBLIC.pem`)"
)
_PUBLIC_FORM = "give paths of PEM files of Ed25519 public keys"


def load_signing_key(text_or_path: str) -> Any:
    """An ``Ed25519PrivateKey`` from PEM text or a path to a PEM file."""
    ed25519 = _crypto()
    serialization = _serialization()
    what = SIGNING_KEY_ENV
    pem = _read_pem(text_or_path, what, _PRIVATE_FORM)
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError):
        raise AotiUsageError(
            f"{what} is not an unencrypted PEM private key; {_PRIVATE_FORM}"
        ) from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise AotiUsageError(f"{what}: an Ed25519 key is needed, not {type(key).__name__}")
    return key


def load_public_keys(path: str, what: str) -> list[Any]:
    """Every ``Ed25519PublicKey`` of a PEM file (or PEM text)."""
    ed25519 = _crypto()
    serialization = _serialization()
    pem = _read_pem(path, what, _PUBLIC_FORM)
    blocks = [match.group(0) for match in _PEM_BLOCK.finditer(pem)] or [pem]
    keys = []
    for number, block in enumerate(blocks, 1):
        where = f"{what}: key {number} of {len(blocks)} in {_shown(path)}"
        try:
            key = serialization.load_pem_public_key(block)
        except (ValueError, TypeError):
            raise AotiUsageError(f"{where} is not a PEM public key; {_PUBLIC_FORM}") from None
        if not isinstance(key, ed25519.Ed25519PublicKey):
            raise AotiUsageError(f"{where} is not an Ed25519 key ({type(key).__name__})")
        keys.append(key)
    return keys


def _shown(text: str) -> str:
    """A path as it may be printed: PEM text given in its place is not."""
    return "the PEM text given" if "-----BEGIN" in text else text.strip()


def load_trust(ini_trusted: Sequence[str] = (), environ: Mapping[str, str] | None = None) -> Trust:
    """The job's keys: the signing key and trusted public keys from the environment, plus
    ``ini_trusted`` (paths from the ini list ``aoti_cache_trusted_keys``)."""
    env = os.environ if environ is None else environ
    signing = env.get(SIGNING_KEY_ENV, "").strip()
    signing_key = load_signing_key(signing) if signing else None
    trusted: dict[str, Any] = {}
    listed = env.get(TRUSTED_KEYS_ENV, "").strip()
    # PEM text instead of paths: taken as such rather than split at its line breaks
    paths = [listed] if "-----BEGIN" in listed else listed.split(os.pathsep)
    sources = [(p, TRUSTED_KEYS_ENV) for p in paths if p.strip()]
    sources += [(p, "ini option aoti_cache_trusted_keys") for p in ini_trusted]
    for path, what in sources:
        for public in load_public_keys(path.strip(), what):
            trusted[key_id(public)] = public
    if signing_key is not None:
        own = signing_key.public_key()
        trusted[key_id(own)] = own
    return Trust(signing_key=signing_key, trusted=trusted)


def generate_key_pair(private_path: Path, public_path: Path) -> str:
    """Write a new Ed25519 key pair as PEM files (the private one 0o600); return its key id."""
    ed25519 = _crypto()
    serialization = _serialization()
    key = ed25519.Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(private_pem)
    public_path.write_bytes(public_pem)
    return key_id(key.public_key())
