"""OpenAI Responses routes: ``POST /v1/responses``, ``GET`` / ``DELETE /v1/responses/{id}``
and ``GET /v1/responses/{id}/input_items``, over the response store.

A response is stored (``store`` true, the default, and a store configured) before its
last event leaves, so a client that sends the next turn as soon as it has read
``response.completed`` finds it. ``previous_response_id`` rebuilds the conversation
from the stored items; a missing or expired id is a 404 before any work starts.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import msgspec
import structlog
from litestar import Request, Response, Router, delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody
from litestar.response import Stream

from dragoman.adapters import responses
from dragoman.adapters.aggregate import ChatResult
from dragoman.adapters.errors import RequestError
from dragoman.adapters.responses import wire
from dragoman.proxy.context import ClientCredential
from dragoman.proxy.chat import answer, start_chat
from dragoman.adapters.paging import item_page
from dragoman.proxy.limits import check_message_count
from dragoman.proxy.models import ModelTable
from dragoman.proxy.openapi_responses import RESPONSES_CREATE, RESPONSES_DELETED, RESPONSES_ITEMS, RESPONSES_STORED
from dragoman.proxy.record import RequestRecord
from dragoman.adapters.responses.conversations import conversation_id
from dragoman.proxy import background
from dragoman.proxy.auto_compaction import compact_if_over
from dragoman.proxy.conversations import append_turn, is_conversation
from dragoman.proxy.response_context import (
    RUNNING, ResponseNotFound, RunsElsewhere, fetched_images, get_response, history_of, owner_of, store_response, stored_status,
)  # fmt: skip
from dragoman.proxy.response_store import NoStore, ResponseStore

log = structlog.get_logger("dragoman.responses")

MAX_ITEMS_PAGE = 100
_item_list = msgspec.json.Decoder(list[dict[str, Any]])


@post(
    "/responses",
    status_code=200,
    summary="Create a response",
    description="OpenAI Responses: a `response` object, or typed SSE events when `stream` is true.",
    tags=["OpenAI Responses"],
    responses=RESPONSES_CREATE,
)
async def create_response(
    request: Request[Any, Any, Any],
    data: JSONBody[wire.ResponsesRequest],
    models: NamedDependency[ModelTable],
    response_store: NamedDependency[ResponseStore],
    record: NamedDependency[RequestRecord],
    credential: NamedDependency[ClientCredential],
) -> Response[bytes] | Stream:
    owner = owner_of(request, models)
    history = await history_of(response_store, data, owner)
    if skipped := responses.builtin_tools(data):
        log.info("built-in tools are not offered to the model", tools=skipped, model=data.model)
    items = responses.input_items(data)
    check_message_count(len(history) + len(items), models.limits, "input")
    fetched = await fetched_images(models, data.model, items)
    canonical = responses.to_canonical(data, responses.decode_items(msgspec.json.encode(history)), fetched)
    keep = data.store is not False and not isinstance(response_store, NoStore)
    turn = [responses.stored_item(item) for item in items]
    seen = [*history, *turn]
    compacted = await compact_if_over(
        models, data, canonical, seen, record, request.receive, credential.authorization, fetched, request.app.state.get("metrics")
    )
    if compacted is not None:
        seen, canonical = compacted.items, compacted.canonical
    context = msgspec.json.encode(seen) if keep else b""
    conversation = conversation_id(data)

    def kept_frames(frames: AsyncIterator[bytes], encoder: responses.StreamEncoder) -> AsyncGenerator[bytes, None]:
        kept = _stored_stream(frames, encoder, response_store if keep else None, context, owner)
        if conversation is not None:
            kept = _added_to_conversation(kept, encoder, response_store, conversation, owner, turn)
        return kept

    if data.background:
        background.check_background(data, keep)
        return await background.start(
            request, data, models, canonical, kept_frames, owner, credential.authorization, record, response_store, context,
            compaction=compacted.item if compacted else None,
        )
    chat = await start_chat(models, canonical, record, authorization=credential.authorization)
    used = canonical.options.merged(chat.route.config.defaults)
    meta = responses.meta_for(data, store=keep, used=used, compaction=compacted.item if compacted else None)
    reply = responses.ResponseReply(meta, stream=bool(data.stream))

    async def kept_body(result: ChatResult) -> bytes:
        response = reply.response(result)
        body = responses.encode_response(response)
        if keep and not await store_response(response_store, response.id, body, context, owner):
            body = responses.encode_response(msgspec.structs.replace(response, store=False))
        if meta.conversation is not None:
            await append_turn(response_store, meta.conversation, owner, [*turn, *responses.output_items(response)])
        return body

    return await answer(chat, reply, record, request.receive, frames=kept_frames, body=kept_body)


@get("/responses/{response_id:str}", summary="Retrieve a stored response", tags=["OpenAI Responses"], responses=RESPONSES_STORED)
async def retrieve_response(
    request: Request[Any, Any, Any],
    response_id: FromPath[str],
    response_store: NamedDependency[ResponseStore],
    models: NamedDependency[ModelTable],
) -> Response[bytes] | Stream:
    if (run := background.runs_of(request).get(response_id, owner_of(request, models))) is not None:
        return background.answer(run, request.query_params)
    stored = await get_response(response_store, response_id, owner_of(request, models))
    if stored is None:
        raise ResponseNotFound(response_id)
    if request.query_params.get("stream") in ("true", "1"):
        if stored_status(stored) in RUNNING:
            raise RunsElsewhere(response_id, "its events stream from that process only; poll without stream=true "
                                "until it ends", param="stream")  # fmt: skip
        raise RequestError(
            "stream: only a background response, while it runs and for a while after, can be streamed again; omit stream",
            param="stream",
        )
    return Response(stored.response, media_type="application/json")


@delete(
    "/responses/{response_id:str}", status_code=200, summary="Delete a stored response", tags=["OpenAI Responses"],
    responses=RESPONSES_DELETED,
)
async def delete_response(
    request: Request[Any, Any, Any],
    response_id: FromPath[str],
    response_store: NamedDependency[ResponseStore],
    models: NamedDependency[ModelTable],
) -> wire.Deleted:
    if is_conversation(response_id) or not await response_store.delete(response_id, owner_of(request, models)):
        raise ResponseNotFound(response_id)
    return wire.Deleted(id=response_id)


@get(
    "/responses/{response_id:str}/input_items", summary="List a stored response's input items", tags=["OpenAI Responses"],
    responses=RESPONSES_ITEMS,
)
async def list_input_items(
    request: Request[Any, Any, Any],
    response_id: FromPath[str],
    response_store: NamedDependency[ResponseStore],
    models: NamedDependency[ModelTable],
) -> wire.ItemList:
    stored = await get_response(response_store, response_id, owner_of(request, models))
    if stored is None:
        raise ResponseNotFound(response_id)
    page, more = item_page(_item_list.decode(stored.input), request.query_params, maximum=MAX_ITEMS_PAGE)
    return wire.ItemList(
        data=page,
        first_id=page[0].get("id") if page else None,
        last_id=page[-1].get("id") if page else None,
        has_more=more,
    )


# -- helpers -------------------------------------------------------------------------------


async def _stored_stream(
    frames: AsyncIterator[bytes],
    encoder: responses.StreamEncoder,
    store: ResponseStore | None,
    context: bytes,
    owner: str,
) -> AsyncGenerator[bytes, None]:
    """The stream, with the response stored before the frame that ends it."""
    stored = False
    async for frame in frames:
        if store is not None and not stored and encoder.final is not None:
            stored = True  # before the frame that ends the stream goes out
            if not await store_response(store, encoder.final.id, responses.encode_response(encoder.final), context, owner):
                frame = encoder.unstored(frame)
        yield frame


async def _added_to_conversation(
    frames: AsyncIterator[bytes], encoder: responses.StreamEncoder, store: ResponseStore, conversation: str, owner: str,
    turn: list[dict[str, Any]],
) -> AsyncGenerator[bytes, None]:
    """The stream, with the turn added to its conversation before the frame that ends it."""
    added = False
    async for frame in frames:
        if not added and encoder.final is not None:
            added = True
            await append_turn(store, conversation, owner, [*turn, *responses.output_items(encoder.final)])
        yield frame


responses_router = Router(
    path="/v1", route_handlers=[create_response, retrieve_response, delete_response, list_input_items]
)
