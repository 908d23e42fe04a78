"""``POST /v1/responses/compact``: a conversation (``input`` and/or
``previous_response_id``) becomes its user messages and one compaction item holding a
summary the model writes of the rest (:mod:`adapters.responses.compaction`). The
summary is an ordinary chat of the same model: the same admission, limits, access log
and metrics as any other request."""

from __future__ import annotations

import time
from typing import Any

import msgspec
from litestar import Request, Router, post
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import JSONBody

from dragoman.adapters import responses
from dragoman.adapters.openai.wire import OpenAIErrorResponse
from dragoman.adapters.responses import wire
from dragoman.adapters.responses.compaction import CompactedResponse, CompactRequest, compacted_response, summary_request
from dragoman.proxy.chat import collect, start_chat
from dragoman.proxy.context import ClientCredential
from dragoman.proxy.limits import check_message_count
from dragoman.proxy.models import ModelTable
from dragoman.proxy.record import RequestRecord
from dragoman.proxy.response_context import fetched_images, history_of, owner_of
from dragoman.proxy.response_store import ResponseStore

_COMPACTED = {
    200: ResponseSpec(CompactedResponse, description="The user messages, then one compaction item.", generate_examples=False),
    **{
        status: ResponseSpec(OpenAIErrorResponse, description=why, generate_examples=False)
        for status, why in (
            (400, "A bad field, named in the message and `param`; or a conversation longer than the model's context."),
            (404, "No such model, or no such `previous_response_id`."),
            (503, "The model is busy (see `Retry-After`)."),
        )
    },
}


@post(
    "/responses/compact", status_code=200, summary="Compact a conversation", tags=["OpenAI Responses"],
    description="The user messages kept, the rest replaced by one `compaction` item: a summary the model writes.",
    responses=_COMPACTED,
)  # fmt: skip
async def compact_response(
    request: Request[Any, Any, Any], data: JSONBody[CompactRequest], models: NamedDependency[ModelTable],
    response_store: NamedDependency[ResponseStore], record: NamedDependency[RequestRecord],
    credential: NamedDependency[ClientCredential],
) -> CompactedResponse:
    create = wire.ResponsesRequest(
        model=data.model, input=data.input, instructions=data.instructions, previous_response_id=data.previous_response_id
    )
    history = await history_of(response_store, create, owner_of(request, models))
    items = responses.input_items(create)
    check_message_count(len(history) + len(items), models.limits, "input")
    canonical = responses.to_canonical(
        create, responses.decode_items(msgspec.json.encode(history)), await fetched_images(models, data.model, items)
    )
    chat = await start_chat(models, summary_request(data.model, canonical.messages), record, authorization=credential.authorization)
    summary = await collect(chat, record, request.receive)
    everything = [*history, *(responses.stored_item(item) for item in items)]
    return compacted_response(everything, summary, int(time.time()), data.safety_identifier)


compaction_router = Router(path="/v1", route_handlers=[compact_response])
