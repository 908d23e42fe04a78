"""Secrets an upstream may echo back, blanked out of what dragoman passes on.

Servers quote what they refused ("Incorrect API key provided: sk-…"), and their error
text reaches the client, the access log and the metrics' error counts. Every secret a
request carried upstream — the configured key, credentials from the URL, a client
key forwarded with ``forward_auth`` — is replaced by ``***`` wherever it appears.
"""

from __future__ import annotations

from collections.abc import Iterable

MASK = "***"


class Redactor:
    __slots__ = ("_texts", "_bytes")

    def __init__(self, secrets: Iterable[str | None]) -> None:
        # Longest first, so a secret containing another is blanked whole.
        found = sorted({s for s in secrets if s}, key=len, reverse=True)
        self._texts = found
        self._bytes = [s.encode() for s in found]

    def __bool__(self) -> bool:
        return bool(self._texts)

    def text(self, value: str) -> str:
        for secret in self._texts:
            if secret in value:
                value = value.replace(secret, MASK)
        return value

    def body(self, value: bytes) -> bytes:
        for secret in self._bytes:
            if secret in value:
                value = value.replace(secret, MASK.encode())
        return value


def bearer_secrets(authorization: str | None) -> list[str]:
    """The whole header value and the credential after its scheme."""
    if not authorization:
        return []
    _, _, credential = authorization.partition(" ")
    return [authorization, credential.strip()]


__all__ = ["MASK", "Redactor", "bearer_secrets"]
