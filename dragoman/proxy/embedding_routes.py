"""Embedding routes of both dialects: Ollama's ``/api/embed`` and legacy
``/api/embeddings``, OpenAI's ``/v1/embeddings``. Each decodes its dialect, runs
:func:`proxy.embedding.embed` and renders the vectors its clients expect."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, Router, post
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import JSONBody

from dragoman.adapters import ollama
from dragoman.adapters.ollama import embed as ollama_embed
from dragoman.adapters.openai import embed as openai_embed
from dragoman.adapters.openai.wire import OpenAIErrorResponse
from dragoman.proxy.embedding import embed
from dragoman.proxy.models import ModelTable
from dragoman.proxy.openapi_responses import _ERROR_STATUSES, _errors
from dragoman.proxy.context import ClientCredential
from dragoman.proxy.record import RequestRecord

_STATUSES = tuple(_ERROR_STATUSES)


def _spec(body: type, text: str, error: type) -> dict[int, ResponseSpec]:
    return {200: ResponseSpec(body, description=text, generate_examples=False), **_errors(error, _STATUSES)}


@post(
    "/api/embed",
    status_code=200,
    summary="Generate embeddings",
    description="Ollama's `EmbedRequest`: `input` a string or a list of strings; unit-length vectors.",
    tags=["Ollama"],
    responses=_spec(ollama_embed.EmbedWireResponse, "One vector per input, in order.", ollama.ErrorResponse),
)
async def api_embed(
    request: Request[Any, Any, Any],
    data: JSONBody[ollama_embed.EmbedWireRequest],
    models: NamedDependency[ModelTable],
    record: NamedDependency[RequestRecord],
    credential: NamedDependency[ClientCredential],
) -> Response[bytes]:
    canonical = ollama_embed.embed_to_canonical(data)
    result = await embed(
        models, canonical, record, request.receive, authorization=credential.authorization
    )
    return Response(ollama_embed.render_embed(result, data.model), media_type="application/json")


@post(
    "/api/embeddings",
    status_code=200,
    summary="Generate an embedding (legacy)",
    description="Ollama's older endpoint: one `prompt`, the model's own vector (not normalised).",
    tags=["Ollama"],
    responses=_spec(ollama_embed.LegacyEmbeddingResponse, "The vector.", ollama.ErrorResponse),
)
async def api_embeddings(
    request: Request[Any, Any, Any],
    data: JSONBody[ollama_embed.LegacyEmbeddingRequest],
    models: NamedDependency[ModelTable],
    record: NamedDependency[RequestRecord],
    credential: NamedDependency[ClientCredential],
) -> Response[bytes]:
    canonical = ollama_embed.legacy_to_canonical(data)
    result = await embed(
        models, canonical, record, request.receive, authorization=credential.authorization
    )
    return Response(ollama_embed.render_legacy(result), media_type="application/json")


@post(
    "/v1/embeddings",
    status_code=200,
    summary="Create embeddings",
    description="OpenAI's embeddings: `input` a string, strings, or token arrays; `encoding_format` float or "
    "base64 (little-endian float32); `dimensions`.",
    tags=["OpenAI"],
    responses=_spec(openai_embed.EmbeddingsResponse, "One vector per input, in order.", OpenAIErrorResponse),
)
async def v1_embeddings(
    request: Request[Any, Any, Any],
    data: JSONBody[openai_embed.EmbeddingsRequest],
    models: NamedDependency[ModelTable],
    record: NamedDependency[RequestRecord],
    credential: NamedDependency[ClientCredential],
) -> Response[bytes]:
    canonical = openai_embed.embeddings_to_canonical(data)
    result = await embed(
        models, canonical, record, request.receive, authorization=credential.authorization
    )
    body = openai_embed.render_embeddings(result, data.model, data.encoding_format)
    return Response(body, media_type="application/json")


embedding_router = Router(path="/", route_handlers=[api_embed, api_embeddings, v1_embeddings])
