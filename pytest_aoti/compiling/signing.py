"""Ed25519 signatures of remote cache entries, and the rule of whom to trust.

A remote store of compiled packages is a trust boundary: whoever can write to it can run
native code on every machine that loads from it. So an entry is loaded only when its
manifest carries a signature, by a trusted key, over the entry's canonical metadata
(content key, package checksum and size, and everything the checks read from the
metadata). Neither the package nor the metadata can then be swapped.

Keys come from the environment and the ini file:

- ``PYTEST_AOTI_CACHE_SIGNING_KEY``: the publisher's private key, as PEM text or a path to
  a PEM file (PKCS#8, unencrypted). Without it nothing is published.
- ``PYTEST_AOTI_CACHE_TRUSTED_KEYS``: paths of PEM public keys, separated by
  ``os.pathsep``; plus the ini list ``aoti_cache_trusted_keys``. A publisher trusts its
  own key. Without any trusted key nothing is loaded.

``cryptography`` is imported only when a key is loaded or a signature checked.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_aoti.errors import AotiUsageError, install_hint

__all__ = [
    "SIGNING_KEY_ENV",
    "TRUSTED_KEYS_ENV",
    "Trust",
    "canonical_bytes",
    "generate_key_pair",
    "load_trust",
]

SIGNING_KEY_ENV = "PYTEST_AOTI_CACHE_SIGNING_KEY"
TRUSTED_KEYS_ENV = "PYTEST_AOTI_CACHE_TRUSTED_KEYS"


def canonical_bytes(document: Mapping[str, Any]) -> bytes:
    """The one byte string a signature covers: sorted keys, no whitespace, ASCII only."""
    return json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise AotiUsageError(
            f"signed remote cache entries need the 'cryptography' package: {install_hint('remote')}"
        ) from None
    return ed25519


def _serialization() -> Any:
    _crypto()
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
        """``{"key_id": ..., "ed25519": base64 signature}`` of ``document``'s canonical bytes."""
        if self.signing_key is None:
            raise ValueError("no signing key: this job publishes nothing")
        signature = self.signing_key.sign(canonical_bytes(document))
        return {
            "key_id": key_id(self.signing_key.public_key()),
            "ed25519": base64.b64encode(signature).decode("ascii"),
        }

    def verify(self, document: Mapping[str, Any], signatures: Any) -> str | None:
        """Why ``document`` is not signed by a trusted key, or None when it is."""
        if not isinstance(signatures, list) or not signatures:
            return "it carries no signature"
        from cryptography.exceptions import InvalidSignature

        payload = canonical_bytes(document)
        signers = []
        for signature in signatures:
            if not isinstance(signature, dict):
                continue
            signer = signature.get("key_id")
            signers.append(str(signer))
            public = self.trusted.get(signer) if isinstance(signer, str) else None
            if public is None:
                continue
            try:
                public.verify(
                    base64.b64decode(signature.get("ed25519", ""), validate=True), payload
                )
            except (InvalidSignature, ValueError, TypeError):
                return f"its signature by key {signer} does not verify"
            return None
        return f"it is signed by key(s) {', '.join(signers) or '?'}, none of them trusted here"


def _read_pem(text_or_path: str, what: str) -> bytes:
    text = text_or_path.strip()
    if text.startswith("-----BEGIN"):
        return text.encode()
    path = Path(text).expanduser()
    try:
        return path.read_bytes()
    except OSError as error:
        raise AotiUsageError(
            f"{what}: cannot read {path} ({error.strerror or error}); give a PEM file"
        ) from None


def load_signing_key(text_or_path: str) -> Any:
    """An ``Ed25519PrivateKey`` from PEM text or a path to a PEM file."""
    ed25519 = _crypto()
    serialization = _serialization()
    what = SIGNING_KEY_ENV
    pem = _read_pem(text_or_path, what)
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as error:
        raise AotiUsageError(
            f"{what}: not an unencrypted PEM private key ({error}); "
            "make one with `python -m pytest_aoti keygen PRIVATE.pem PUBLIC.pem`"
        ) from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise AotiUsageError(f"{what}: an Ed25519 key is needed, not {type(key).__name__}")
    return key


def load_public_key(path: str, what: str) -> Any:
    """An ``Ed25519PublicKey`` from a PEM file."""
    ed25519 = _crypto()
    serialization = _serialization()
    pem = _read_pem(path, what)
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError) as error:
        raise AotiUsageError(f"{what}: {path} is not a PEM public key ({error})") from None
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise AotiUsageError(f"{what}: {path} is not an Ed25519 key ({type(key).__name__})")
    return key


def load_trust(ini_trusted: Sequence[str] = (), environ: Mapping[str, str] | None = None) -> Trust:
    """The job's keys: the signing key and trusted public keys from the environment, plus
    ``ini_trusted`` (paths from the ini list ``aoti_cache_trusted_keys``)."""
    env = os.environ if environ is None else environ
    signing = env.get(SIGNING_KEY_ENV, "").strip()
    signing_key = load_signing_key(signing) if signing else None
    trusted: dict[str, Any] = {}
    paths = [p for p in env.get(TRUSTED_KEYS_ENV, "").split(os.pathsep) if p.strip()]
    for path in paths:
        public = load_public_key(path.strip(), TRUSTED_KEYS_ENV)
        trusted[key_id(public)] = public
    for path in ini_trusted:
        public = load_public_key(path, "ini option aoti_cache_trusted_keys")
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
