"""OpenAI Conversations: ``/v1/conversations`` (create, retrieve, update, delete) and
its items (list, create, retrieve, delete), kept in the response store
(:mod:`proxy.conversations`). ``conversation`` on ``POST /v1/responses`` reads a
conversation's items as the turn's history and adds the turn's input and output to it."""

from __future__ import annotations

import time
from typing import Any

from litestar import Request, Router, delete, get, post
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromPath, JSONBody

from dragoman.adapters.openai.wire import OpenAIErrorResponse
from dragoman.adapters.responses import wire
from dragoman.adapters.responses.conversations import (
    Conversation,
    ConversationCreate,
    ConversationDeleted,
    ConversationUpdate,
    ItemsCreate,
    checked_metadata,
    new_items,
)
from dragoman.adapters.responses.ids import new_conversation_id
from dragoman.proxy import conversations
from dragoman.proxy.conversations import ItemNotFound
from dragoman.adapters.paging import item_page
from dragoman.proxy.models import ModelTable
from dragoman.proxy.response_context import owner_of
from dragoman.proxy.response_store import ResponseStore

MAX_ITEMS_PAGE = 100
_TAGS = ["OpenAI Conversations"]


def _spec(body: type, what: str) -> dict[int, ResponseSpec]:
    errors = {400: "A bad field, named in the message and `param`.", 404: "No such conversation or item (or another key's).",
              413: "The conversation would pass `server.responses.max_bytes`."}  # fmt: skip
    return {
        200: ResponseSpec(body, description=what, generate_examples=False),
        **{status: ResponseSpec(OpenAIErrorResponse, description=why, generate_examples=False) for status, why in errors.items()},
    }


@post("/conversations", status_code=200, summary="Create a conversation", tags=_TAGS, responses=_spec(Conversation, "The conversation."))
async def create_conversation(
    request: Request[Any, Any, Any], data: JSONBody[ConversationCreate], models: NamedDependency[ModelTable],
    response_store: NamedDependency[ResponseStore],
) -> Conversation:
    conversation = Conversation(id=new_conversation_id(), created_at=int(time.time()), metadata=checked_metadata(data.metadata))
    await conversations.save(response_store, conversation, new_items(data.items or []), owner_of(request, models))
    return conversation


@get("/conversations/{conversation_id:str}", summary="Retrieve a conversation", tags=_TAGS, responses=_spec(Conversation, "The conversation."))
async def retrieve_conversation(
    request: Request[Any, Any, Any], conversation_id: FromPath[str], models: NamedDependency[ModelTable],
    response_store: NamedDependency[ResponseStore],
) -> Conversation:
    return (await conversations.load(response_store, conversation_id, owner_of(request, models)))[0]


@post("/conversations/{conversation_id:str}", status_code=200, summary="Update a conversation's metadata", tags=_TAGS,
      responses=_spec(Conversation, "The conversation."))  # fmt: skip
async def update_conversation(
    request: Request[Any, Any, Any], conversation_id: FromPath[str], data: JSONBody[ConversationUpdate],
    models: NamedDependency[ModelTable], response_store: NamedDependency[ResponseStore],
) -> Conversation:
    metadata = checked_metadata(data.metadata)
    owner = owner_of(request, models)

    def relabel(conversation: Conversation, items: list[dict[str, Any]]) -> tuple[Conversation, list[dict[str, Any]]]:
        return Conversation(id=conversation.id, created_at=conversation.created_at, metadata=metadata), items

    return await conversations.change(response_store, conversation_id, owner, relabel)


@delete("/conversations/{conversation_id:str}", status_code=200, summary="Delete a conversation", tags=_TAGS,
        responses=_spec(ConversationDeleted, "Deleted."))  # fmt: skip
async def delete_conversation(
    request: Request[Any, Any, Any], conversation_id: FromPath[str], models: NamedDependency[ModelTable],
    response_store: NamedDependency[ResponseStore],
) -> ConversationDeleted:
    owner = owner_of(request, models)
    await conversations.load(response_store, conversation_id, owner)  # a 404 for ids that are not conversations
    await response_store.delete(conversation_id, owner)
    return ConversationDeleted(id=conversation_id)


@get("/conversations/{conversation_id:str}/items", summary="List a conversation's items", tags=_TAGS,
     responses=_spec(wire.ItemList, "A page of items."))  # fmt: skip
async def list_items(
    request: Request[Any, Any, Any], conversation_id: FromPath[str], models: NamedDependency[ModelTable],
    response_store: NamedDependency[ResponseStore],
) -> wire.ItemList:
    _, items = await conversations.load(response_store, conversation_id, owner_of(request, models))
    page, more = item_page(items, request.query_params, maximum=MAX_ITEMS_PAGE)
    return _listing(page, has_more=more)


@post("/conversations/{conversation_id:str}/items", status_code=200, summary="Add items to a conversation", tags=_TAGS,
      responses=_spec(wire.ItemList, "The items added."))  # fmt: skip
async def create_items(
    request: Request[Any, Any, Any], conversation_id: FromPath[str], data: JSONBody[ItemsCreate],
    models: NamedDependency[ModelTable], response_store: NamedDependency[ResponseStore],
) -> wire.ItemList:
    added = new_items(data.items)
    await conversations.append(response_store, conversation_id, owner_of(request, models), added)
    return _listing(added, has_more=False)


@get("/conversations/{conversation_id:str}/items/{item_id:str}", summary="Retrieve a conversation item", tags=_TAGS,
     responses=_spec(dict[str, Any], "The item."))  # fmt: skip
async def retrieve_item(
    request: Request[Any, Any, Any], conversation_id: FromPath[str], item_id: FromPath[str],
    models: NamedDependency[ModelTable], response_store: NamedDependency[ResponseStore],
) -> dict[str, Any]:
    _, items = await conversations.load(response_store, conversation_id, owner_of(request, models))
    for item in items:
        if item.get("id") == item_id:
            return item
    raise ItemNotFound(conversation_id, item_id)


@delete("/conversations/{conversation_id:str}/items/{item_id:str}", status_code=200, summary="Delete a conversation item",
        tags=_TAGS, responses=_spec(Conversation, "The conversation."))  # fmt: skip
async def delete_item(
    request: Request[Any, Any, Any], conversation_id: FromPath[str], item_id: FromPath[str],
    models: NamedDependency[ModelTable], response_store: NamedDependency[ResponseStore],
) -> Conversation:

    def without(conversation: Conversation, items: list[dict[str, Any]]) -> tuple[Conversation, list[dict[str, Any]]]:
        kept = [item for item in items if item.get("id") != item_id]
        if len(kept) == len(items):
            raise ItemNotFound(conversation_id, item_id)
        return conversation, kept

    return await conversations.change(response_store, conversation_id, owner_of(request, models), without)


def _listing(page: list[dict[str, Any]], *, has_more: bool) -> wire.ItemList:
    return wire.ItemList(
        data=page, first_id=page[0].get("id") if page else None, last_id=page[-1].get("id") if page else None, has_more=has_more
    )


conversation_router = Router(
    path="/v1",
    route_handlers=[
        create_conversation, retrieve_conversation, update_conversation, delete_conversation,
        list_items, create_items, retrieve_item, delete_item,
    ],
)  # fmt: skip
