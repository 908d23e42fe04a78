"""Anthropic-dialect routes: ``/v1/messages`` and ``/v1/messages/count_tokens``
(``/v1/models`` is OpenAI's route, answering an Anthropic client in its shape through
``Dialect.model_listing``).

Claude Code posts to ``/v1/messages?beta=true`` with ``anthropic-beta`` headers; the
query and the betas change nothing here (the fields they unlock are read or ignored
by the converter as documented in docs/fidelity.md).
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, Router, post
from litestar.di import NamedDependency
from litestar.params import JSONBody
from litestar.response import Stream

from dragoman.adapters import anthropic
from dragoman.adapters.anthropic import wire
from dragoman.proxy.chat import answer, count_tokens, start_chat
from dragoman.proxy.image_fetch import check_before_fetching, fetch_as_data_uris
from dragoman.proxy.limits import check_message_count
from dragoman.proxy.models import ModelTable
from dragoman.proxy.openapi_responses import ANTHROPIC_COUNT, ANTHROPIC_MESSAGES
from dragoman.proxy.context import ClientCredential
from dragoman.proxy.record import RequestRecord

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
    return await answer(chat, anthropic.reply_for(data), record, request.receive)


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


anthropic_router = Router(path="/v1", route_handlers=[messages, messages_count_tokens])
