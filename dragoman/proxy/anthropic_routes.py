"""Anthropic-dialect routes: ``/v1/messages``, ``/v1/messages/count_tokens``, and the
Anthropic-shaped model listing that ``/v1/models`` answers to clients sending
``anthropic-version``.

Claude Code posts to ``/v1/messages?beta=true`` with ``anthropic-beta`` headers; the
query and the betas change nothing here (the fields they unlock are read or ignored
by the converter as documented in docs/fidelity.md).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from litestar import Request, Response, Router, post
from litestar.di import NamedDependency
from litestar.params import JSONBody
from litestar.response import Stream

from dragoman.adapters import anthropic
from dragoman.adapters.anthropic import wire
from dragoman.adapters.errors import ModelNotFound
from dragoman.proxy.chat import collect, count_tokens, encode_stream, start_chat
from dragoman.proxy.image_fetch import check_before_fetching, fetch_as_data_uris
from dragoman.proxy.limits import check_message_count, page_limit
from dragoman.proxy.models import ModelTable
from dragoman.proxy.openapi_responses import ANTHROPIC_COUNT, ANTHROPIC_MESSAGES
from dragoman.proxy.context import ClientCredential
from dragoman.proxy.record import RequestRecord

MAX_PAGE = 1000
DEFAULT_PAGE = 20


async def _fetched(models: ModelTable, model: str, messages: list[wire.MessageParam]) -> dict[str, str]:
    fetch = models.config.server.image_fetch
    urls = anthropic.remote_image_urls(messages) if fetch.enabled else []
    if not urls:
        return {}
    check_before_fetching(models, model, len(anthropic.image_blocks(messages)))
    return await fetch_as_data_uris(urls, fetch)


@post(
    "/messages",
    status_code=200,
    summary="Create a message",
    description="Anthropic Messages: JSON, or named SSE events when `stream` is true.",
    tags=["Anthropic"],
    responses=ANTHROPIC_MESSAGES,
)
async def messages(
    request: Request[Any, Any, Any],
    data: JSONBody[wire.MessagesRequest],
    models: NamedDependency[ModelTable],
    record: NamedDependency[RequestRecord],
    credential: NamedDependency[ClientCredential],
) -> Response[bytes] | Stream:
    check_message_count(len(data.messages), models.limits)
    canonical = anthropic.to_canonical(data, await _fetched(models, data.model, data.messages))
    chat = await start_chat(models, canonical, record, authorization=credential.authorization)
    if data.stream:
        encoder = anthropic.StreamEncoder(data.model)
        return Stream(encode_stream(chat, encoder, record), media_type=encoder.media_type)
    result = await collect(chat, record, request.receive)
    return Response(anthropic.render_response(result, data.model), media_type="application/json")


@post(
    "/messages/count_tokens",
    status_code=200,
    summary="Count the tokens of a message request",
    description="The prompt's length in the model's own tokens (its tokenizer over the rendered prompt).",
    tags=["Anthropic"],
    responses=ANTHROPIC_COUNT,
)
async def messages_count_tokens(
    data: JSONBody[wire.CountTokensRequest], models: NamedDependency[ModelTable], record: NamedDependency[RequestRecord]
) -> wire.TokenCount:
    check_message_count(len(data.messages), models.limits)
    canonical = anthropic.count_request(data, await _fetched(models, data.model, data.messages))
    return wire.TokenCount(input_tokens=await count_tokens(models, canonical, record))


# -- /v1/models for Anthropic clients (routed by openai_routes, which owns the path) -------


def _info(models: ModelTable, name: str, context_length: int | None) -> wire.ModelInfo:
    created = models.started.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")
    return wire.ModelInfo(id=name, display_name=name, created_at=created, max_input_tokens=context_length)


async def model_page(models: ModelTable, query: dict[str, str]) -> wire.ModelPage:
    """One page of the listing, paged by ``limit``, ``after_id`` and ``before_id`` as the
    ``anthropic`` client pages it."""
    limit = page_limit(query.get("limit"), default=DEFAULT_PAGE, maximum=MAX_PAGE)
    listed = [_info(models, name, route.config.context_length) for name, route, _ in await models.listed_names()]
    ids = [info.id for info in listed]
    if (after := query.get("after_id")) is not None:
        start = ids.index(after) + 1 if after in ids else len(ids)
        page, more = listed[start : start + limit], start + limit < len(listed)
    elif (before := query.get("before_id")) is not None:
        end = ids.index(before) if before in ids else 0
        page, more = listed[max(0, end - limit) : end], end - limit > 0
    else:
        page, more = listed[:limit], limit < len(listed)
    return wire.ModelPage(
        data=page, has_more=more, first_id=page[0].id if page else None, last_id=page[-1].id if page else None
    )


def model_info(models: ModelTable, name: str) -> wire.ModelInfo:
    if not name:
        raise ModelNotFound(name)
    route, _ = models.lookup(name)
    return _info(models, name, route.config.context_length)


anthropic_router = Router(path="/v1", route_handlers=[messages, messages_count_tokens])
