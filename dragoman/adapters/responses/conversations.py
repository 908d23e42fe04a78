"""OpenAI Conversations (``/v1/conversations``) on the wire, and the pure rules over a
conversation's items: a conversation is an id, its metadata and an ordered list of
items in the same stored form as a response's input items (:func:`items.stored_item`),
so a turn on it goes through the same converter as ``previous_response_id``."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from dragoman.adapters.errors import RequestError
from dragoman.adapters.responses import wire
from dragoman.adapters.responses.convert import to_canonical
from dragoman.adapters.responses.echoed import check_metadata
from dragoman.adapters.responses.items import stored_item

# OpenAI's bound on the items one create call adds (the Agents SDK sends 20 at a time).
MAX_ITEMS_PER_CALL = 20


class ConversationCreate(msgspec.Struct, kw_only=True):
    items: list[wire.InputItem] | None = None
    metadata: dict[str, str] | None = None


class ConversationUpdate(msgspec.Struct, kw_only=True):
    metadata: dict[str, str]


class ItemsCreate(msgspec.Struct, kw_only=True):
    items: list[wire.InputItem]


class Conversation(msgspec.Struct, kw_only=True):
    id: str
    created_at: int
    metadata: dict[str, str] = msgspec.field(default_factory=dict)
    object: Literal["conversation"] = "conversation"


class ConversationDeleted(msgspec.Struct):
    id: str
    object: Literal["conversation.deleted"] = "conversation.deleted"
    deleted: bool = True


def conversation_id(request: wire.ResponsesRequest) -> str | None:
    """``conversation`` as an id: a string, or an object with ``id``."""
    value = request.conversation
    if value is None:
        return None
    if isinstance(value, dict):
        value = value.get("id")
    if not isinstance(value, str) or not value:
        raise RequestError("conversation: must be a conversation id or an object with an id", param="conversation")
    if request.previous_response_id is not None:
        raise RequestError(
            "conversation: cannot be used with previous_response_id; send one or the other", param="conversation"
        )
    return value


def new_items(items: list[wire.InputItem], field: str = "items") -> list[dict[str, Any]]:
    """Items to add, checked as a turn's input would be (an item a turn could not use is
    refused now, by its path under ``field``, not when the next turn reads it)."""
    if len(items) > MAX_ITEMS_PER_CALL:
        raise RequestError(f"{field}: {len(items)} items; at most {MAX_ITEMS_PER_CALL} per request", param=field)
    try:
        to_canonical(wire.ResponsesRequest(model="-", input=items))
    except RequestError as exc:
        message = exc.message.replace("input", field, 1) if exc.message.startswith("input") else exc.message
        param = exc.param.replace("input", field, 1) if exc.param and exc.param.startswith("input") else field
        raise RequestError(message, param=param) from None
    return [stored_item(item) for item in items]


def checked_metadata(metadata: dict[str, str] | None) -> dict[str, str]:
    check_metadata(metadata)
    return metadata or {}


__all__ = [
    "MAX_ITEMS_PER_CALL",
    "Conversation",
    "ConversationCreate",
    "ConversationDeleted",
    "ConversationUpdate",
    "ItemsCreate",
    "checked_metadata",
    "conversation_id",
    "new_items",
]
