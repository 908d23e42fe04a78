"""Identifiers and signatures in the shapes Anthropic clients expect."""

from __future__ import annotations

import base64
import hashlib
import secrets

# Base62, as Anthropic's own ids: some clients check ids with a pattern.
_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
SIGNATURE_PREFIX = "dragoman1."


def _token(length: int = 24) -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(length))


def new_message_id() -> str:
    return "msg_" + _token()


def new_tool_use_id() -> str:
    return "toolu_" + _token()


def tool_use_id(call_id: str | None) -> str:
    """A call's id as a ``toolu_`` id: kept when it is one, new otherwise. Ids from
    other dialects (``call_…``) are replaced consistently in the reply, and the
    client hands the new one back with the result, so the pairing holds."""
    return call_id if call_id and call_id.startswith("toolu_") else new_tool_use_id()


def thinking_signature(thinking: str) -> str:
    """An opaque signature for thinking a local model produced. It only names the text
    (a digest); dragoman accepts any signature in history and never verifies one, and
    an Anthropic upstream is never shown one of these (see ``is_own_signature``)."""
    digest = hashlib.sha256(thinking.encode("utf-8")).digest()[:24]
    return SIGNATURE_PREFIX + base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


def is_own_signature(signature: str | None) -> bool:
    return bool(signature) and signature.startswith(SIGNATURE_PREFIX)  # type: ignore[union-attr]


__all__ = ["is_own_signature", "new_message_id", "new_tool_use_id", "thinking_signature", "tool_use_id"]
