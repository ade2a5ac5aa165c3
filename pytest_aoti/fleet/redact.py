"""Secrets kept out of every line the plugin prints or writes: the one place URL
credentials are masked (header, summary, problems, usage errors, exception texts from a
store's client, JSON, JUnit)."""

from __future__ import annotations

import re

__all__ = ["redact"]

# scheme://user:password@host or scheme://token@host: everything between "//" and the last
# "@" before the path (a password may hold "@" itself)
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/\s'\"]+)@")
# ?X-Amz-Signature=…, &sig=…, &token=…: credentials in a query string (presigned URLs)
_QUERY_SECRET = re.compile(
    r"(?P<name>[?&](?:[A-Za-z0-9_\-]*(?:signature|sig|token|secret|password|credential|key)"
    r"[A-Za-z0-9_\-]*))=(?P<value>[^&\s'\"]+)",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """``text`` with the user and password of every URL in it, and credentials in query
    strings, replaced by ``***``."""
    text = _USERINFO.sub(lambda m: f"{m['scheme']}***@", text)
    return _QUERY_SECRET.sub(lambda m: f"{m['name']}=***", text)
