"""Identifiers in the shapes Responses clients expect, and the opaque reasoning token."""

from __future__ import annotations

import base64
import binascii
import secrets

ENCRYPTED_PREFIX = "dragoman1:"  # our "encrypted_content": the thinking, encoded, not secret


def _new(prefix: str) -> str:
    return prefix + secrets.token_hex(24)


def new_response_id() -> str:
    return _new("resp_")


def new_conversation_id() -> str:
    return _new("conv_")


def new_compaction_id() -> str:
    return _new("cmp_")


def new_message_id() -> str:
    return _new("msg_")


def new_function_call_id() -> str:
    return _new("fc_")


def new_reasoning_id() -> str:
    return _new("rs_")


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


def new_output_id() -> str:
    return _new("fco_")


def encode_reasoning(thinking: str) -> str:
    """What ``include: ["reasoning.encrypted_content"]`` returns: with ``store: false``
    (Codex), clients hand it back next turn and the thinking is read from it again. It
    is an encoding, not a secret: the same text is in the item's ``content``."""
    return ENCRYPTED_PREFIX + base64.b64encode(thinking.encode("utf-8")).decode("ascii")


def decode_reasoning(token: str | None) -> str | None:
    """The thinking in one of our tokens; None for another server's (unreadable here)."""
    if not token or not token.startswith(ENCRYPTED_PREFIX):
        return None
    try:
        return base64.b64decode(token[len(ENCRYPTED_PREFIX) :], validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


COMPACTION_PREFIX = "dragoman-compaction:v1:"


def encode_compaction(summary: str) -> str:
    """A compaction item's ``encrypted_content``: the summary the model wrote, encoded
    (not secret); the next turn reads it back as the earlier conversation."""
    return COMPACTION_PREFIX + base64.b64encode(summary.encode("utf-8")).decode("ascii")


def decode_compaction(token: str | None) -> str | None:
    """The summary in one of our compaction items; None for another server's."""
    if not token or not token.startswith(COMPACTION_PREFIX):
        return None
    try:
        return base64.b64decode(token[len(COMPACTION_PREFIX) :], validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
