"""The one failover loop every upstream request runs — streamed and whole chats,
embeddings, Anthropic's count_tokens: which endpoints it tries, when it stops trying,
and the error when none answered.

A request moves to another endpoint only while nothing of its reply has been handed
on, so only while nothing can have reached the client; a 4xx is the request's fault
and passes through at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Generic, TypeVar

import aiohttp
import msgspec
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from yarl import URL

from dragoman.adapters.canonical import EmbedRequest, Request
from dragoman.adapters.errors import BackendError, BackendTimeout, DragomanError
from dragoman.backends.upstream.affinity import affinity_key
from dragoman.backends.upstream.clients import ClientLease
from dragoman.backends.upstream.endpoints import Endpoint, EndpointPool
from dragoman.backends.upstream.exchange import Failed, Reply, open_reply, read_rest
from dragoman.backends.upstream.redaction import Redactor
from dragoman.backends.upstream.settings import UpstreamSettings

T = TypeVar("T")
# One client span per attempt (an endpoint tried); a no-op unless tracing is on (proxy/tracing.py).
_TRACER = trace.get_tracer("dragoman")

HeadersFor = Callable[[Endpoint, Request | EmbedRequest | None], tuple[dict[str, str], Redactor]]
# What is read of a reply before it counts as an answer: (reply, endpoint, total deadline).
ReadReply = Callable[[Reply, Endpoint, float], Awaitable[T]]


class Answer(msgspec.Struct, Generic[T], frozen=True):
    """The endpoint that answered, its reply, what ``read`` made of it, what to blank
    out of it, and the deadline the rest of the reply must meet."""

    endpoint: Endpoint
    reply: Reply
    value: T
    redact: Redactor
    total_deadline: float


class Endpoints:
    """An upstream entry's endpoints as its requests see them: the pool that orders
    them, their connections, and the failover loop (:meth:`first_answer`). The
    dialect's part — headers and errors — comes from the backend as two functions."""

    def __init__(
        self,
        settings: UpstreamSettings,
        pool: EndpointPool,
        *,
        headers_for: HeadersFor,
        decode_error: Callable[[int, bytes], DragomanError],
    ) -> None:
        self.settings = settings
        self.pool = pool
        self._headers_for = headers_for
        self._decode_error = decode_error
        self._clients = ClientLease(settings.max_connections)
        self._urls: dict[tuple[str, str], URL] = {}  # (endpoint, path) -> URL, parsed once
        # Connect bounded here; every later wait by our own deadlines (exchange.py).
        self._timeout = aiohttp.ClientTimeout(sock_connect=settings.connect_timeout)
        self._first_byte_silence = f"{settings.first_byte_timeout:g}s (first_byte_timeout)"
        self._total_silence = f"{settings.total_timeout:g}s (total_timeout)"

    def client_for(self, endpoint: Endpoint) -> aiohttp.ClientSession:
        return self._clients.client_for(endpoint.url)

    async def aclose(self) -> None:
        await self._clients.aclose()

    def url(self, endpoint: Endpoint, path: str) -> URL:
        """``path`` below ``endpoint``'s base URL, parsed once."""
        url = self._urls.get((endpoint.url, path))
        if url is None:
            url = self._urls[(endpoint.url, path)] = URL(endpoint.url + path)
        return url

    def error_decoder(self, redact: Redactor) -> Callable[[int, bytes], DragomanError]:
        def decode(status: int, body: bytes) -> DragomanError:
            return self._decode_error(status, redact.body(body))  # some servers quote the key they refused

        return decode

    @asynccontextmanager
    async def first_answer(
        self, request: Request | EmbedRequest, path: str, body: bytes, read: ReadReply[T], *, streaming: bool
    ) -> AsyncIterator[Answer[T]]:
        """The first endpoint that answers the POST of ``body`` to ``path``, its reply
        read by ``read`` (a failure there tries the next endpoint too). The endpoint
        counts the request as outstanding until the ``async with`` block ends, so a
        stream relayed inside it is counted to its end. A streamed reply must begin
        within ``first_byte_timeout``; a whole one is sent when done, so only
        ``total_timeout`` bounds the wait."""
        loop = asyncio.get_running_loop()
        s = self.settings
        total_deadline = loop.time() + s.total_timeout
        failures: list[tuple[Endpoint, Failed]] = []
        attempts = self.pool.order(affinity_key(request) if self.pool.affinity else None)
        for endpoint in with_one_retry(attempts):
            now = loop.time()
            if now >= total_deadline:
                break
            headers, redact = self._headers_for(endpoint, request)
            if streaming:
                deadline, silence = min(now + s.first_byte_timeout, total_deadline), self._first_byte_silence
            else:
                deadline, silence = total_deadline, self._total_silence
            endpoint.outstanding += 1
            span = _TRACER.start_span(
                f"upstream POST {path}", kind=SpanKind.CLIENT,
                attributes={"server.address": endpoint.label, "gen_ai.request.model": request.model},
            )
            carrier: dict[str, str] = {}
            propagate.inject(carrier, context=trace.set_span_in_context(span))  # traceparent, continued upstream
            if carrier:  # tracing on: never into ``headers`` itself, which the backend shares
                headers = {**headers, **carrier}
            try:
                try:
                    reply = await open_reply(
                        self.client_for(endpoint), self.url(endpoint, path), body, headers, self._timeout, deadline,
                        self.error_decoder(redact), silence=silence, upstream=endpoint.label,
                    )
                    value = await read(reply, endpoint, total_deadline)
                    self.pool.succeeded(endpoint)
                except Failed as failed:
                    span.set_status(Status(StatusCode.ERROR, failed.reason))
                    self.pool.failed(endpoint, failed.reason)
                    failures.append((endpoint, failed))
                    if gives_up(attempts, failed):
                        break
                    continue
                except DragomanError:
                    self.pool.succeeded(endpoint)  # a 4xx: the endpoint works, the request does not
                    raise
                yield Answer(endpoint, reply, value, redact, total_deadline)
                return
            finally:
                endpoint.outstanding -= 1
                span.end()
        raise exhausted(request.model, failures)

    async def post_whole(self, path: str, body: bytes, request: Request | EmbedRequest) -> tuple[bytes, Endpoint]:
        """The whole 2xx reply body of a POST below the base URL, and the endpoint that
        gave it (embeddings; Anthropic's count_tokens)."""
        async with self.first_answer(request, path, body, self._read_body, streaming=False) as answer:
            return answer.value, answer.endpoint

    async def _read_body(self, reply: Reply, endpoint: Endpoint, total_deadline: float) -> bytes:
        s = self.settings
        try:
            return await read_rest(reply, s.idle_timeout, total_deadline, max_bytes=s.max_reply_bytes, upstream=endpoint.label)
        finally:
            await reply.aclose()


def with_one_retry(endpoints: list[Endpoint]) -> list[Endpoint]:
    """Each endpoint once; a lone endpoint twice, since a pooled connection the server
    closed at the same moment fails without the server being down."""
    return endpoints * 2 if len(endpoints) == 1 else endpoints


def gives_up(attempts: list[Endpoint], failed: Failed) -> bool:
    """The one retry is for broken connections, not slow or failing servers."""
    return len(attempts) == 1 and (failed.timed_out or failed.responded)


def exhausted(model: str, failures: list[tuple[Endpoint, Failed]]) -> DragomanError:
    """The error when no endpoint answered: the upstream's own 5xx if one gave one,
    else 504 if they were all silent, else 502, naming each endpoint and why."""
    if not failures:
        return BackendTimeout(f"model '{model}': total_timeout passed before an upstream answered")
    answered = [f.error for _, f in failures if f.error is not None]
    if answered:
        return answered[-1]
    detail = "; ".join(f"{e.label}: {f.reason}" for e, f in failures)
    if all(f.timed_out for _, f in failures):
        return BackendTimeout(f"model '{model}': upstream {detail}")
    if len({e.url for e, _ in failures}) == 1:
        endpoint, failed = failures[-1]
        verb = "failed" if failed.responded else "unreachable"
        return BackendError(f"model '{model}': upstream {endpoint.label} {verb}: {failed.reason}")
    return BackendError(f"model '{model}': no upstream endpoint answered ({detail})")


__all__ = ["Answer", "Endpoints", "exhausted", "gives_up", "with_one_retry"]
