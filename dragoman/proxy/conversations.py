"""Conversations kept in the response store: one row per conversation (``conv_…``),
its object in the row's ``response`` column and its items, in order, in ``input`` — so
a conversation has the store's owner isolation, ``max_age`` and ``max_bytes`` bounds and
pruning, exactly as a stored response. A row's age is that of its last change: a
conversation in use does not expire under its users.

Adding items reads the row, extends it and writes it back; one lock per process orders
those writes, so two turns finishing together both land (with several server processes
on one file, two turns finishing at the same instant can still race: see
docs/dialects.md)."""

from __future__ import annotations

import asyncio
import time
import weakref
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
_locks: weakref.WeakKeyDictionary[ResponseStore, asyncio.Lock] = weakref.WeakKeyDictionary()


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


async def append(store: ResponseStore, conversation_id: str, owner: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add ``items`` at the end; the conversation's items after."""
    async with writing(store):
        conversation, held = await load(store, conversation_id, owner)
        held = [*held, *items]
        await save(store, conversation, held, owner)
        return held


def writing(store: ResponseStore) -> asyncio.Lock:
    """Held around a read, change and write of a conversation's row (one per store, so
    per application and its event loop)."""
    return _locks.setdefault(store, asyncio.Lock())


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
