"""Dialect-neutral embedding plumbing between a route and a backend.

The same path as chat: model lookup, limits, capability check, the admission gate,
the request timeout, shutdown draining and the request record (access log and
metrics); then the dialect's promises (``dimensions``, unit length) are applied to
whatever vectors the backend made, so every backend keeps them alike.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
from litestar.types import Receive
import numpy as np

from dragoman.adapters.canonical import EmbedRequest, EmbedResult, Secret, Timings, Usage
from dragoman.adapters.embeddings import shape_vectors
from dragoman.adapters.errors import BackendTimeout, ModelNotFound, RequestError, UnsupportedFeature
from dragoman.backends.base import Backend, Embedder
from dragoman.config import ModelRoute
from dragoman.config.schema import Limits
from dragoman.proxy.chat import ClientDisconnected
from dragoman.proxy.models import ModelTable
from dragoman.proxy.record import RequestRecord


def check_embed_request(request: EmbedRequest, limits: Limits) -> None:
    """Bounds known before any tokenizing: inputs, characters, token-array lengths."""
    if len(request.inputs) > limits.max_embed_inputs:
        raise RequestError(
            f"input: {len(request.inputs)} inputs in one request; the limit is {limits.max_embed_inputs} "
            "(server.limits.max_embed_inputs)",
            param="input",
        )
    tokens = 0
    for i, item in enumerate(request.inputs):
        if isinstance(item, str):
            if len(item) > limits.max_embed_input_chars:
                raise RequestError(
                    f"input[{i}]: {len(item)} characters; the limit is {limits.max_embed_input_chars} "
                    "(server.limits.max_embed_input_chars)",
                    param=f"input[{i}]",
                )
        else:
            tokens += len(item)
    if tokens > limits.max_embed_tokens:
        raise RequestError(
            f"input: {tokens} tokens in one request; the limit is {limits.max_embed_tokens} "
            "(server.limits.max_embed_tokens)",
            param="input",
        )


def prepare(table: ModelTable, request: EmbedRequest, record: RequestRecord) -> tuple[ModelRoute, Backend, EmbedRequest]:
    if record.key_policy is not None and not record.key_policy.allows(request.model):
        raise ModelNotFound(request.model)  # as OpenAI answers a model a key may not use: it does not exist for it
    route, backend = table.lookup(request.model)
    record.model = request.model
    record.entry = route.config.name
    record.backend = route.config.backend
    record.embed_inputs = len(request.inputs)
    check_embed_request(request, table.limits)
    if not backend.capabilities(request.model).embedding or not isinstance(backend, Embedder):
        raise UnsupportedFeature(
            f"model '{request.model}' does not support embeddings; use an embedding model (the default config "
            "serves all-minilm), or for an ONNX chat model one built with include_hidden_states=true",
            param="model",
        )
    num_ctx = request.num_ctx or route.config.defaults.num_ctx
    request = msgspec.structs.replace(request, num_ctx=num_ctx, max_tokens=table.limits.max_embed_tokens)
    return route, backend, request


async def embed(
    table: ModelTable, request: EmbedRequest, record: RequestRecord, receive: Receive, *, authorization: str | None = None
) -> EmbedResult:
    """The shaped vectors for ``request``; an empty input list loads the model (Ollama's
    contract) and answers no vectors."""
    began = time.perf_counter_ns()
    table.lifetime.check_accepting()
    route, backend, request = prepare(table, request, record)
    if authorization is not None:
        request = msgspec.structs.replace(request, authorization=Secret(authorization))
    if not request.inputs:
        await backend.load(request.model, request.keep_alive)
        ns = time.perf_counter_ns() - began
        return EmbedResult(vectors=np.zeros((0, 0), dtype=np.float32), timings=Timings(total_ns=ns, load_ns=ns))
    timeout = table.limits.request_timeout
    release = await table.admit_embedding(route)
    table.lifetime.in_flight += 1
    try:
        assert isinstance(backend, Embedder)  # checked by prepare
        result = await _until_done(backend.embed(request), receive, timeout, _deadline_left(table), request.model)
    finally:
        table.lifetime.in_flight -= 1
        release()
    vectors = shape_vectors(result.vectors, dimensions=request.dimensions, normalize=request.normalize)
    if len(vectors) != len(request.inputs):
        raise RequestError(f"the backend returned {len(vectors)} vectors for {len(request.inputs)} inputs")
    record.usage = Usage(prompt_tokens=result.prompt_tokens)
    timings = msgspec.structs.replace(result.timings, total_ns=time.perf_counter_ns() - began)
    return EmbedResult(vectors=vectors, prompt_tokens=result.prompt_tokens, timings=timings)


def _deadline_left(table: ModelTable) -> float | None:
    deadline = table.lifetime.deadline
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


async def _until_done(
    work: Any, receive: Receive, timeout: float | None, grace: float | None, model: str
) -> EmbedResult:
    """Run the backend's embedding, stopping it when the client leaves or the request
    timeout (or the shutdown grace period) passes."""
    limit = min((t for t in (timeout, grace) if t is not None), default=None)
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_wait_disconnect(receive))
    try:
        done, _ = await asyncio.wait({task, gone}, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
    if task in done:
        return task.result()
    if gone in done:
        raise ClientDisconnected("client disconnected before the embeddings were complete")
    raise BackendTimeout(f"model '{model}': request timed out")


async def _wait_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


__all__ = ["check_embed_request", "embed"]
