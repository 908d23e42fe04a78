"""Completions in both dialects: Ollama's ``/api/generate`` and OpenAI's ``/v1/completions``.

Both go through the chat plumbing (:mod:`proxy.chat`) with a canonical completion
request: the same model lookup, limits, admission, metrics, logs and errors, and a
non-streaming reply that is the aggregate of the same events.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from litestar import Request, Response, Router, post
from litestar.di import NamedDependency
from litestar.params import JSONBody
from litestar.response import Stream

from dragoman.adapters.canonical import CompletionRequest
from dragoman.adapters.errors import DragomanError
from dragoman.adapters.ollama import generate, wire
from dragoman.adapters.ollama.convert import keep_alive_seconds
from dragoman.adapters.openai import completion_wire, completions
from dragoman.proxy.chat import Chat, answer, collect, encode_stream, start_chat
from dragoman.proxy.limits import check_prompts
from dragoman.proxy.models import ModelTable
from dragoman.proxy.ollama_routes import load_or_unload
from dragoman.proxy.openapi_responses import OLLAMA_GENERATE, OPENAI_COMPLETION
from dragoman.proxy.context import ClientCredential
from dragoman.proxy.record import RequestRecord


@post(
    "/api/generate",
    status_code=200,
    summary="Generate a completion",
    description="Ollama's `/api/generate`: a templated prompt, a raw one (`raw: true`) or fill-in-the-middle "
    "(`suffix`). An empty `prompt` loads the model; with `keep_alive: 0` it unloads it.",
    tags=["Ollama"],
    responses=OLLAMA_GENERATE,
)
async def generate_route(
    request: Request[Any, Any, Any],
    data: JSONBody[wire.GenerateRequest],
    models: NamedDependency[ModelTable],
    record: NamedDependency[RequestRecord],
    credential: NamedDependency[ClientCredential],
) -> Response[bytes] | Stream:
    if not data.prompt:
        return await load_or_unload(models, data.model, keep_alive_seconds(data.keep_alive), generate.render_load_response)
    chat = await start_chat(models, generate.to_canonical(data), record, authorization=credential.authorization)
    return await answer(chat, generate.reply_for(data), record, request.receive)


@post(
    "/v1/completions",
    status_code=200,
    summary="Create completion",
    description="OpenAI's legacy completions: raw prompts (a list is one choice each), `suffix` for "
    "fill-in-the-middle, legacy `logprobs`; SSE when `stream` is true.",
    tags=["OpenAI"],
    responses=OPENAI_COMPLETION,
)
async def completions_route(
    request: Request[Any, Any, Any],
    data: JSONBody[completion_wire.CompletionRequest],
    models: NamedDependency[ModelTable],
    record: NamedDependency[RequestRecord],
    credential: NamedDependency[ClientCredential],
) -> Response[bytes] | Stream:
    prompts = completions.to_canonical(data)
    check_prompts(len(prompts), models.limits)
    authorization = credential.authorization
    echoes = [p.prompt if data.echo else "" for p in prompts]
    if data.stream:
        include_usage = bool(data.stream_options and data.stream_options.include_usage)
        stream = completions.CompletionStream(data.model, include_usage=include_usage, top_logprobs=data.logprobs)
        first = await start_chat(models, prompts[0], record, authorization=authorization)
        frames = _choices(models, prompts, first, stream, echoes, record, authorization)
        return Stream(frames, media_type=stream.media_type)
    # One prompt after another: a list costs what its prompts cost, never more at once.
    results = []
    for prompt in prompts:
        chat = await start_chat(models, prompt, record, authorization=authorization)
        results.append(await collect(chat, record, request.receive))
    body = completions.render_response(results, data.model, echoes=echoes, top_logprobs=data.logprobs)
    return Response(body, media_type="application/json")


async def _choices(
    models: ModelTable,
    prompts: list[CompletionRequest],
    first: Chat,
    stream: completions.CompletionStream,
    echoes: list[str],
    record: RequestRecord,
    authorization: str | None,
) -> AsyncIterator[bytes]:
    """Each prompt's choice in turn, then the usage chunk and ``[DONE]``; a failure
    ends the stream with an error event."""
    chat: Chat | None = first
    for index, prompt in enumerate(prompts):
        if chat is None:
            try:
                chat = await start_chat(models, prompt, record, authorization=authorization)
            except DragomanError as err:
                record.error = err.message
                yield stream.error(err)
                break
        async for frame in encode_stream(chat, stream.choice(index, echoes[index]), record):
            yield frame
        chat = None
        if stream.failed:
            break
    yield stream.close()


completion_router = Router(path="/", route_handlers=[generate_route, completions_route])
