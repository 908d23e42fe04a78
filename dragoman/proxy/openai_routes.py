"""OpenAI-dialect routes: ``/v1/chat/completions`` and ``/v1/models``."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, Router, get, post
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromPath, JSONBody
from litestar.response import Stream

from dragoman.adapters import openai
from dragoman.adapters.dialects import dialect_named
from dragoman.adapters.errors import ModelNotFound
from dragoman.adapters.model_listing import ListedModel, ModelListing
from dragoman.adapters.openai.stream import wants_usage
from dragoman.adapters.openai.models import MODEL_LISTING, ModelCard, ModelList
from dragoman.config import ModelRoute
from dragoman.adapters.openai.remote_images import image_part_count, remote_image_urls, with_fetched_images
from dragoman.adapters.openai.choices import choice_count
from dragoman.proxy.chat import answer, start_chat
from dragoman.proxy.choices import answer_choices
from dragoman.proxy.limits import check_message_count
from dragoman.proxy.image_fetch import check_before_fetching, fetch_as_data_uris
from dragoman.proxy.models import ModelTable
from dragoman.proxy.openapi_responses import OPENAI_CHAT, OPENAI_MODEL
from dragoman.proxy.context import ClientCredential
from dragoman.proxy.record import RequestRecord


@post(
    "/chat/completions",
    status_code=200,
    summary="Create chat completion",
    description="OpenAI Chat Completions: JSON, or SSE when `stream` is true.",
    tags=["OpenAI"],
    responses=OPENAI_CHAT,
)
async def chat_completions(
    request: Request[Any, Any, Any],
    data: JSONBody[openai.ChatCompletionRequest],
    models: NamedDependency[ModelTable],
    record: NamedDependency[RequestRecord],
    credential: NamedDependency[ClientCredential],
) -> Response[bytes] | Stream:
    check_message_count(len(data.messages), models.limits)
    n = choice_count(data.n, models.limits.max_choices)
    fetch = models.config.server.image_fetch
    if fetch.enabled and (urls := remote_image_urls(data)):
        check_before_fetching(models, data.model, image_part_count(data))
        data = with_fetched_images(data, await fetch_as_data_uris(urls, fetch))
    canonical = openai.to_canonical(data)
    if n > 1:
        return await answer_choices(
            models, canonical, n, record, request.receive,
            model=data.model, include_usage=wants_usage(data), authorization=credential.authorization,
        )  # fmt: skip
    chat = await start_chat(models, canonical, record, authorization=credential.authorization)
    return await answer(chat, openai.reply_for(data), record, request.receive)


@get(
    "/models",
    summary="List models",
    tags=["OpenAI"],
    description="Anthropic's shape (`data`, `has_more`, `first_id`, `last_id`) when the request sends `anthropic-version`.",
    responses={200: ResponseSpec(ModelList, description="The served names.", generate_examples=False)},
)
async def list_models(
    request: Request[Any, Any, Any], models: NamedDependency[ModelTable], record: NamedDependency[RequestRecord]
) -> Response[bytes]:
    listed = [_listed(models, name, route) for name, route, _ in await models.listed_names()]
    return _json(_listing(record).page(listed, dict(request.query_params)))


@get(
    "/models/{model:path}",
    summary="Retrieve a model",
    tags=["OpenAI"],
    responses={200: ResponseSpec(ModelCard, description="The model.", generate_examples=False), **OPENAI_MODEL},
)
async def retrieve_model(
    model: FromPath[str], models: NamedDependency[ModelTable], record: NamedDependency[RequestRecord]
) -> Response[bytes]:
    name = model.lstrip("/")
    if not name:  # checked first: a catch-all pattern would match ""
        raise ModelNotFound(name)
    route, _ = models.lookup(name)  # raises 404 for unknown names
    return _json(_listing(record).one(_listed(models, name, route)))


def _listing(record: RequestRecord) -> ModelListing:
    """In the client's dialect: the anthropic SDK lists models on this path too, sending
    ``anthropic-version``; a dialect with no listing of its own gets OpenAI's."""
    return dialect_named(record.dialect).model_listing or MODEL_LISTING


def _listed(models: ModelTable, name: str, route: ModelRoute) -> ListedModel:
    return ListedModel(name, route.config.backend, models.started, route.config.context_length)


def _json(body: bytes) -> Response[bytes]:
    return Response(body, media_type="application/json")


openai_router = Router(path="/v1", route_handlers=[chat_completions, list_models, retrieve_model])
