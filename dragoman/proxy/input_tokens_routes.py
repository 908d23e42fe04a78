"""Counting a prompt before sending it: ``POST /v1/responses/input_tokens`` (OpenAI
Responses) and ``POST /v1/chat/completions/input_tokens`` (llama-server's counterpart).

Both convert the body exactly as a create request would and ask the backend's own
tokenizer (:class:`backends.base.TokenCounter`) over the rendered prompt, so the count
includes the chat template, the entry's system prompt and the tool definitions. A
backend that cannot count (an OpenAI-compatible upstream has no such route) is a 400
naming ``model``; the same bounds as a create request apply before anything is counted.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Router, post
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import JSONBody

from dragoman.adapters import openai, responses
from dragoman.adapters.openai.remote_images import image_part_count, remote_image_urls, with_fetched_images
from dragoman.adapters.openai.wire import OpenAIErrorResponse
from dragoman.adapters.responses.input_tokens import InputTokenCount, InputTokensRequest, as_create
from dragoman.proxy.chat import count_tokens
from dragoman.proxy.image_fetch import check_before_fetching, fetch_as_data_uris
from dragoman.proxy.limits import check_message_count
from dragoman.proxy.models import ModelTable
from dragoman.proxy.record import RequestRecord
from dragoman.proxy.response_store import ResponseStore
from dragoman.proxy.response_context import fetched_images, history_of, owner_of

_COUNTED = {
    200: ResponseSpec(InputTokenCount, description="The prompt's length in the model's own tokens.", generate_examples=False),
    **{
        status: ResponseSpec(OpenAIErrorResponse, description=why, generate_examples=False)
        for status, why in (
            (400, "A bad field, named in the message and `param`; or a model whose backend cannot count."),
            (404, "No such model, or no such `previous_response_id`."),
            (413, "The body or its images are larger than the configured limits."),
        )
    },
}


@post(
    "/responses/input_tokens",
    status_code=200,
    summary="Count a Responses request's input tokens",
    description="The prompt a `POST /v1/responses` with these fields would send, in the model's own tokens.",
    tags=["OpenAI Responses"],
    responses=_COUNTED,
)
async def responses_input_tokens(
    request: Request[Any, Any, Any],
    data: JSONBody[InputTokensRequest],
    models: NamedDependency[ModelTable],
    response_store: NamedDependency[ResponseStore],
    record: NamedDependency[RequestRecord],
) -> InputTokenCount:
    create = as_create(data)
    history = await history_of(response_store, create, owner_of(request, models))
    items = responses.input_items(create)
    check_message_count(len(history) + len(items), models.limits, "input")
    canonical = responses.to_canonical(create, responses.decode_items(msgspec.json.encode(history)), await fetched_images(models, create.model, items))
    return InputTokenCount(input_tokens=await count_tokens(models, canonical, record))


@post(
    "/chat/completions/input_tokens",
    status_code=200,
    summary="Count a chat completion request's input tokens",
    description="llama-server's route: the prompt a `POST /v1/chat/completions` with this body would send, in the model's own tokens.",
    tags=["OpenAI"],
    responses=_COUNTED,
)
async def chat_input_tokens(
    data: JSONBody[openai.ChatCompletionRequest], models: NamedDependency[ModelTable], record: NamedDependency[RequestRecord]
) -> InputTokenCount:
    check_message_count(len(data.messages), models.limits)
    fetch = models.config.server.image_fetch
    if fetch.enabled and (urls := remote_image_urls(data)):
        check_before_fetching(models, data.model, image_part_count(data))
        data = with_fetched_images(data, await fetch_as_data_uris(urls, fetch))
    return InputTokenCount(input_tokens=await count_tokens(models, openai.to_canonical(data), record))


input_tokens_router = Router(path="/v1", route_handlers=[responses_input_tokens, chat_input_tokens])
