"""OpenAI Responses routes: ``POST /v1/responses``, ``GET`` / ``DELETE /v1/responses/{id}``
and ``GET /v1/responses/{id}/input_items``, over the response store.

A response is stored (``store`` true, the default, and a store configured) before its
last event leaves, so a client that sends the next turn as soon as it has read
``response.completed`` finds it. ``previous_response_id`` rebuilds the conversation
from the stored items; a missing or expired id is a 404 before any work starts.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import structlog
from litestar import Request, Response, Router, delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody
from litestar.response import Stream

from dragoman.adapters import responses
from dragoman.adapters.errors import DragomanError, RequestError
from dragoman.adapters.responses import wire
from dragoman.proxy.auth import key_owner
from dragoman.proxy.context import ClientCredential, ClientKey
from dragoman.proxy.chat import Chat, collect, encode_stream, start_chat
from dragoman.proxy.image_fetch import check_before_fetching, fetch_as_data_uris
from dragoman.proxy.limits import check_message_count, page_limit
from dragoman.proxy.models import ModelTable
from dragoman.proxy.openapi_responses import RESPONSES_CREATE, RESPONSES_DELETED, RESPONSES_ITEMS, RESPONSES_STORED
from dragoman.proxy.record import RequestRecord
from dragoman.proxy.response_store import NoStore, ResponseStore, StoredResponse

log = structlog.get_logger("dragoman.responses")

MAX_ITEMS_PAGE = 100
_item_list = msgspec.json.Decoder(list[dict[str, Any]])
_response_decoder = msgspec.json.Decoder(wire.Response)


class ResponseNotFound(DragomanError):
    status = 404

    def __init__(self, response_id: str, param: str | None = None) -> None:
        where = f"{param}: " if param else ""
        super().__init__(
            f"{where}response '{response_id}' not found (never stored, stored with store: false, expired or deleted)",
            param=param,
            code="response_not_found",
        )


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
    client_key: NamedDependency[ClientKey],
) -> Response[bytes] | Stream:
    owner = _owner(client_key, models)
    history = await _history(response_store, data.previous_response_id, owner)
    if skipped := responses.builtin_tools(data):
        log.info("built-in tools are not offered to the model", tools=skipped, model=data.model)
    items = responses.input_items(data)
    check_message_count(len(history) + len(items), models.limits, "input")
    canonical = responses.to_canonical(data, responses.decode_items(msgspec.json.encode(history)), await _fetched(models, data.model, items))
    keep = data.store is not False and not isinstance(response_store, NoStore)
    context = msgspec.json.encode([*history, *(responses.stored_item(item) for item in items)]) if keep else b""
    meta = responses.meta_for(data, store=keep)
    chat = await start_chat(models, canonical, record, authorization=credential.authorization)
    if data.stream:
        encoder = responses.StreamEncoder(meta)
        frames = _stored_stream(chat, encoder, record, response_store if keep else None, context, owner)
        return Stream(frames, media_type=encoder.media_type)
    result = await collect(chat, record, request.receive)
    reply = responses.build_response(result, meta)
    body = responses.encode_response(reply)
    if keep and not await _store(response_store, reply.id, body, context, owner):
        body = responses.encode_response(msgspec.structs.replace(reply, store=False))
    return Response(body, media_type="application/json")


@get("/responses/{response_id:str}", summary="Retrieve a stored response", tags=["OpenAI Responses"], responses=RESPONSES_STORED)
async def retrieve_response(
    request: Request[Any, Any, Any],
    response_id: FromPath[str],
    response_store: NamedDependency[ResponseStore],
    models: NamedDependency[ModelTable],
    client_key: NamedDependency[ClientKey],
) -> Response[bytes]:
    if request.query_params.get("stream") in ("true", "1"):
        raise RequestError("stream: replaying a stored response as a stream is not supported; omit stream", param="stream")
    stored = await response_store.get(response_id, _owner(client_key, models))
    if stored is None:
        raise ResponseNotFound(response_id)
    return Response(stored.response, media_type="application/json")


@delete(
    "/responses/{response_id:str}", status_code=200, summary="Delete a stored response", tags=["OpenAI Responses"],
    responses=RESPONSES_DELETED,
)
async def delete_response(
    response_id: FromPath[str],
    response_store: NamedDependency[ResponseStore],
    models: NamedDependency[ModelTable],
    client_key: NamedDependency[ClientKey],
) -> wire.Deleted:
    if not await response_store.delete(response_id, _owner(client_key, models)):
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
    client_key: NamedDependency[ClientKey],
) -> wire.ItemList:
    stored = await response_store.get(response_id, _owner(client_key, models))
    if stored is None:
        raise ResponseNotFound(response_id)
    query = request.query_params
    limit = page_limit(query.get("limit"), default=20, maximum=MAX_ITEMS_PAGE)
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise RequestError(f"order: unsupported value '{order}'; allowed: asc, desc", param="order")
    items = _item_list.decode(stored.input)
    if order == "desc":
        items.reverse()
    if (after := query.get("after")) is not None:
        ids = [item.get("id") for item in items]
        items = items[ids.index(after) + 1 :] if after in ids else []
    page = items[:limit]
    return wire.ItemList(
        data=page,
        first_id=page[0].get("id") if page else None,
        last_id=page[-1].get("id") if page else None,
        has_more=len(items) > limit,
    )


# -- helpers -------------------------------------------------------------------------------


def _owner(client_key: ClientKey, models: ModelTable) -> str:
    return key_owner(client_key.key, bool(models.config.api_keys))


async def _history(store: ResponseStore, previous_id: str | None, owner: str) -> list[dict[str, Any]]:
    """The items an earlier response saw and produced, in order: only one of this key's."""
    if previous_id is None:
        return []
    stored = await store.get(previous_id, owner)
    if stored is None:
        raise ResponseNotFound(previous_id, param="previous_response_id")
    earlier = _response_decoder.decode(stored.response)
    return [*_item_list.decode(stored.input), *responses.output_items(earlier)]


async def _fetched(models: ModelTable, model: str, items: list[wire.InputItem]) -> dict[str, str]:
    fetch = models.config.server.image_fetch
    urls = responses.remote_image_urls(items) if fetch.enabled else []
    if not urls:
        return {}
    check_before_fetching(models, model, len(responses.image_parts(items)))
    return await fetch_as_data_uris(urls, fetch)


async def _stored_stream(
    chat: Chat,
    encoder: responses.StreamEncoder,
    record: RequestRecord,
    store: ResponseStore | None,
    context: bytes,
    owner: str,
) -> AsyncIterator[bytes]:
    stored = False
    async for frame in encode_stream(chat, encoder, record):
        if store is not None and not stored and encoder.final is not None:
            stored = True  # before the frame that ends the stream goes out
            if not await _store(store, encoder.final.id, responses.encode_response(encoder.final), context, owner):
                frame = encoder.unstored(frame)
        yield frame


async def _store(store: ResponseStore, response_id: str, body: bytes, context: bytes, owner: str) -> bool:
    """Whether the response was kept. When it was not (too big for the store, or the disk
    failed) the reply says ``store: false``, which the SDKs parse, rather than a 413 that
    would throw the generated answer away, or a ``store: true`` whose id then 404s."""
    try:
        return await store.put(StoredResponse(response_id, time.time(), body, context, owner))
    except Exception as exc:  # the reply itself is good; a full disk must not cut it
        log.error("could not store the response", response_id=response_id, error=str(exc))
        return False


responses_router = Router(
    path="/v1", route_handlers=[create_response, retrieve_response, delete_response, list_input_items]
)
