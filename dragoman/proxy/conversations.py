"""Conversations kept in the response store: one row per conversation (``conv_…``),
its object in the row's ``response`` column and its items, in order, in ``input`` — so
a conversation has the store's owner isolation, ``max_age`` and ``max_bytes`` bounds and
pruning, exactly as a stored response. A row's age is that of its last change: a
conversation in use does not expire under its users.

A change (items added or deleted, metadata set) reads the row, changes it and writes it
back as one transaction of the store (:meth:`ResponseStore.update`), so turns finishing
together through any server processes or replicas sharing the store all land."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgspec
import structlog

from dragoman.adapters.errors import DragomanError
from dragoman.adapters.responses.conversations import Conversation
from dragoman.proxy.response_store import NoStore, ResponseStore, StoredResponse

log = structlog.get_logger("dragoman.responses")

PREFIX = "conv_"
_items = msgspec.json.Decoder(list[dict[str, Any]])
_conversation = msgspec.json.Decoder(Conversation)
# A conversation and its items, changed: run inside the store's write transaction, so
# what it reads is the latest and an error it raises changes nothing.
Edit = Callable[[Conversation, list[dict[str, Any]]], tuple[Conversation, list[dict[str, Any]]]]


class ConversationNotFound(DragomanError):
    status = 404

    def __init__(self, conversation_id: str, param: str | None = None) -> None:
        where = f"{param}: " if param else ""
        super().__init__(
            f"{where}conversation '{conversation_id}' not found (never created, expired or deleted)",
            param=param, code="conversation_not_found",
        )  # fmt: skip


class ItemNotFound(DragomanError):
    status = 404

    def __init__(self, conversation_id: str, item_id: str) -> None:
        super().__init__(f"item '{item_id}' not found in conversation '{conversation_id}'", code="item_not_found")


class ConversationNotKept(DragomanError):
    status = 413

    def __init__(self, conversation_id: str) -> None:
        super().__init__(
            f"conversation '{conversation_id}': the store cannot keep it (larger than server.responses.max_bytes, "
            "or than this key's share of it); delete some of its items or raise the bound",
            code="conversation_too_large",
        )


class StoreOff(DragomanError):
    status = 400

    def __init__(self) -> None:
        super().__init__(
            "conversations are kept in the response store, which is off (server.responses.kind: none); "
            "set kind: sqlite to use them",
            code="unsupported_feature",
        )


async def load(store: ResponseStore, conversation_id: str, owner: str, param: str | None = None) -> tuple[Conversation, list[dict[str, Any]]]:
    if isinstance(store, NoStore):
        raise StoreOff()
    row = await store.get(conversation_id, owner) if conversation_id.startswith(PREFIX) else None
    if row is None:
        raise ConversationNotFound(conversation_id, param)
    return _conversation.decode(row.response), _items.decode(row.input)


async def save(store: ResponseStore, conversation: Conversation, items: list[dict[str, Any]], owner: str) -> None:
    if isinstance(store, NoStore):
        raise StoreOff()
    row = StoredResponse(conversation.id, time.time(), msgspec.json.encode(conversation), msgspec.json.encode(items), owner)
    if not await store.put(row):
        raise ConversationNotKept(conversation.id)


async def change(store: ResponseStore, conversation_id: str, owner: str, edit: Edit) -> Conversation:
    """The conversation after ``edit``, applied to its latest state and written in one
    transaction of the store."""
    if isinstance(store, NoStore):
        raise StoreOff()
    if not conversation_id.startswith(PREFIX):
        raise ConversationNotFound(conversation_id)
    edited: list[Conversation] = []

    def on_row(row: StoredResponse) -> StoredResponse:
        conversation, items = edit(_conversation.decode(row.response), _items.decode(row.input))
        edited[:] = [conversation]
        return StoredResponse(row.id, time.time(), msgspec.json.encode(conversation), msgspec.json.encode(items), owner)

    kept = await store.update(conversation_id, owner, on_row)
    if kept is None:
        raise ConversationNotFound(conversation_id)
    if not kept:
        raise ConversationNotKept(conversation_id)
    return edited[0]


async def append(store: ResponseStore, conversation_id: str, owner: str, items: list[dict[str, Any]]) -> None:
    """Add ``items`` at the end."""
    await change(store, conversation_id, owner, lambda conversation, held: (conversation, [*held, *items]))


async def append_turn(store: ResponseStore, conversation_id: str, owner: str, items: list[dict[str, Any]]) -> bool:
    """A finished turn's input and output, added after the reply was made: a failure
    here (the conversation deleted meanwhile, the store full) is logged, not raised,
    so it cannot cut off a reply already generated."""
    try:
        await append(store, conversation_id, owner, items)
        return True
    except DragomanError as exc:
        log.warning("turn not added to its conversation", conversation_id=conversation_id, error=exc.message)
    except Exception as exc:
        log.error("turn not added to its conversation", conversation_id=conversation_id, error=str(exc))
    return False


def is_conversation(row_id: str) -> bool:
    return row_id.startswith(PREFIX)
