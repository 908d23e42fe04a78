"""Embedding requests (and other whole-reply POSTs) to an upstream, with chat's
endpoints, failover and timeouts.

A reply is read whole before anything is returned, so every failure before it is
complete may go to another endpoint, as a non-streaming chat does; a 4xx is the
request's fault and passes through at once.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from dragoman.adapters.canonical import EmbedRequest, EmbedResult, Request
from dragoman.adapters.errors import BackendError, DragomanError
from dragoman.backends.upstream.endpoints import Endpoint
from dragoman.backends.upstream.exchange import Failed, open_reply, read_rest
from dragoman.backends.upstream.failover import exhausted, gives_up, with_one_retry

if TYPE_CHECKING:
    from dragoman.backends.upstream.backend import HttpUpstreamBackend


async def embed_upstream(backend: HttpUpstreamBackend, request: EmbedRequest) -> EmbedResult:
    path, body = backend.encode_embed(request, backend.settings.model or request.model)
    raw, endpoint = await post_whole(backend, path, body, request)
    try:
        return backend.parse_embed(raw, len(request.inputs))
    except ValueError as exc:
        raise BackendError(f"model '{request.model}': upstream {endpoint.label}: {exc}") from None


async def post_whole(
    backend: HttpUpstreamBackend, path: str, body: bytes, request: EmbedRequest | Request
) -> tuple[bytes, Endpoint]:
    """The whole 2xx reply body of a POST below the base URL, and the endpoint that gave
    it (embeddings; Anthropic's count_tokens)."""
    loop = asyncio.get_running_loop()
    s = backend.settings
    total_deadline = loop.time() + s.total_timeout
    failures: list[tuple[Endpoint, Failed]] = []
    attempts = backend.pool.order()
    for endpoint in with_one_retry(attempts):
        if loop.time() >= total_deadline:
            break
        client = backend._clients.client_for(endpoint.url)
        headers, redact = backend.headers_for(endpoint, request)
        endpoint.outstanding += 1
        try:
            reply = await open_reply(
                client, backend.url(endpoint, path), body, headers, backend._timeout, total_deadline,
                backend.error_decoder(redact), silence=backend._total_silence, upstream=endpoint.label,
            )
            try:
                raw = await read_rest(
                    reply, s.idle_timeout, total_deadline, max_bytes=s.max_reply_bytes, upstream=endpoint.label
                )
            finally:
                await reply.aclose()
            backend.pool.succeeded(endpoint)
        except Failed as failed:
            backend.pool.failed(endpoint, failed.reason)
            failures.append((endpoint, failed))
            if gives_up(attempts, failed):
                break
            continue
        except DragomanError:
            backend.pool.succeeded(endpoint)  # a 4xx: the endpoint works, the request does not
            raise
        finally:
            endpoint.outstanding -= 1
        return raw, endpoint
    raise exhausted(request.model, failures)


__all__ = ["embed_upstream", "post_whole"]
