"""The part of the upstream backends every dialect shares: a request sent to the first
endpoint that answers (:mod:`~backends.upstream.failover`), its reply relayed as events
(:mod:`~backends.upstream.relay`).

The upstream is asked to stream when the client asked to: a whole reply is one JSON
body to parse instead of a chunk per token, which is most of the cost of a proxied
non-streaming request. A request is retried on another endpoint only while nothing
has been yielded, so only while nothing can have reached the client (a whole reply
is read completely before its first event); after that a failure is an ``ErrorEvent``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import ClassVar

import msgspec
import structlog

from dragoman.adapters.canonical import (
    ChatRequest,
    CompletionRequest,
    EmbedRequest,
    EmbedResult,
    ErrorEvent,
    Event,
    Request,
    Secret,
)
from dragoman.adapters.errors import BackendError, DragomanError, UnsupportedFeature
from dragoman.adapters.json_depth import TOO_DEEP
from dragoman.backends.base import Capabilities, LoadedModel, ModelDetails
from dragoman.backends.upstream.discovery import ModelCatalog
from dragoman.backends.upstream.endpoints import Endpoint, EndpointPool
from dragoman.backends.upstream.exchange import Reply, get_json_body
from dragoman.backends.upstream.failover import Endpoints
from dragoman.backends.upstream.redaction import Redactor, bearer_secrets
from dragoman.backends.upstream.relay import Call, StreamDecoder, read_whole, relay_stream
from dragoman.backends.upstream.settings import UpstreamSettings
from dragoman.config import ModelRoute

log = structlog.get_logger("dragoman.upstream")

DISCOVERY_TIMEOUT = 10.0  # seconds; discovery must not hold /api/tags up for long


class HttpUpstreamBackend:
    """Subclasses name the dialect: paths, request encoding, reply decoding."""

    Settings: ClassVar[type[UpstreamSettings]] = UpstreamSettings
    chat_path: ClassVar[str]
    models_path: ClassVar[str]
    kind: ClassVar[str]

    def __init__(self, route: ModelRoute) -> None:
        self.route = route
        self.settings: UpstreamSettings = route.settings  # type: ignore[assignment]
        s = self.settings
        self.pool = EndpointPool(
            s.urls, max_failures=s.max_failures, cooldown=s.cooldown, model=route.config.name, affinity=s.affinity == "prefix"
        )
        self.endpoints = Endpoints(s, self.pool, headers_for=self.headers_for, decode_error=self.decode_error)
        self._secret = s.secret_key
        # Bodies are read raw, chunk by chunk: ask for them uncompressed.
        self._headers = {"content-type": "application/json", "accept-encoding": "identity", **self.dialect_headers()}
        if self._secret:
            self._headers.update(self.auth_headers(Secret(f"Bearer {self._secret}")))
        self.catalog = (
            ModelCatalog(self._fetch_models, ttl=s.discover_ttl, pattern=route.config.name) if s.discover else None
        )

    # -- dialect hooks ------------------------------------------------------------------

    def encode_request(self, request: ChatRequest, model: str) -> bytes:
        """The chat body for the upstream, which knows the model as ``model``; it asks
        for a stream when the client did."""
        raise NotImplementedError

    def dialect_headers(self) -> dict[str, str]:
        """Headers every request of the dialect carries (Anthropic's version)."""
        return {}

    def auth_headers(self, authorization: Secret) -> dict[str, str]:
        """The credentials, given as an ``Authorization`` value, as the dialect sends them."""
        return {"authorization": authorization}

    def completion_call(self, request: CompletionRequest, model: str) -> Call:
        """The request a completion becomes: the dialect's completion endpoint, or
        its chat endpoint for a templated prompt where that is the one that templates."""
        raise NotImplementedError

    def chat_call(self, request: ChatRequest, model: str) -> Call:
        return Call(self.chat_path, self.encode_request(request, model), self.decoder, self.parse_response)

    def decoder(self) -> StreamDecoder:
        raise NotImplementedError

    def decode_error(self, status: int, body: bytes) -> DragomanError:
        raise NotImplementedError

    def parse_response(self, body: bytes) -> list[Event]:
        """A whole (non-streaming) reply as the events a stream would have carried."""
        raise NotImplementedError

    def parse_models(self, body: bytes) -> dict[str, ModelDetails]:
        raise NotImplementedError

    def encode_embed(self, request: EmbedRequest, model: str) -> tuple[str, bytes]:
        """(path below the base URL, body) of an embedding request."""
        raise NotImplementedError

    def parse_embed(self, body: bytes, expected: int) -> EmbedResult:
        """The vectors of an embedding reply; ``ValueError`` when it cannot be read."""
        raise NotImplementedError

    # -- Backend protocol -----------------------------------------------------------------

    def capabilities(self, model: str) -> Capabilities:
        # The upstream decides what it can do and says so in its own error.
        return Capabilities(
            tools=True, vision=True, thinking=True, json_schema=True, logprobs=True, insert=True, embedding=True
        )

    def details(self, model: str) -> ModelDetails:
        found = self.catalog.details(self.settings.model or model) if self.catalog else None
        return found or ModelDetails(format=self.kind, family="remote")

    async def load(self, model: str, keep_alive: float | None) -> None:
        return None

    async def unload(self, model: str) -> None:
        return None

    def loaded(self) -> list[LoadedModel]:
        return []

    async def list_models(self) -> list[str]:
        """The upstream's own models that this entry routes (``discover: true``)."""
        return await self.catalog.names() if self.catalog else []

    async def aclose(self) -> None:
        await self.endpoints.aclose()

    def endpoint_health(self) -> dict[str, bool]:
        """For ``/metrics``: which endpoints are in rotation (not cooling down)."""
        return {e.label: self.pool.healthy(e) for e in self.pool.endpoints}

    async def ready(self) -> tuple[bool, str]:
        """For ``/health/ready``: some endpoint answers its model list."""
        problems = []
        for endpoint in self.pool.order():
            try:
                await self._get_models_body(endpoint)
            except DragomanError as exc:
                problems.append(f"{endpoint.label}: {exc.message}")
                continue
            return True, f"{endpoint.label} reachable"
        return False, "; ".join(problems)

    async def embed(self, request: EmbedRequest) -> EmbedResult:
        path, body = self.encode_embed(request, self.settings.model or request.model)
        raw, endpoint = await self.endpoints.post_whole(path, body, request)
        try:
            return self.parse_embed(raw, len(request.inputs))
        except ValueError as exc:
            raise BackendError(f"model '{request.model}': upstream {endpoint.label}: {exc}") from None

    def chat(self, request: ChatRequest) -> AsyncIterator[Event]:
        return self.exchange(request, lambda model: self.chat_call(request, model))

    def complete(self, request: CompletionRequest) -> AsyncIterator[Event]:
        return self.exchange(request, lambda model: self.completion_call(self._without_memory(request), model))

    def _without_memory(self, request: CompletionRequest) -> CompletionRequest:
        """Ollama's token memory means nothing to another dialect's server: refused by
        name (an Ollama upstream overrides this and forwards it)."""
        if request.context:
            raise UnsupportedFeature(
                f"context: an upstream {self.kind} server keeps no token memory; send the earlier turns "
                "as messages (/api/chat) instead",
                param="context",
            )
        return request

    async def exchange(self, request: Request, make_call: Callable[[str], Call]) -> AsyncIterator[Event]:
        """Sends the call ``make_call`` writes for the upstream's name of the model to
        the first endpoint that answers, and relays its reply. The call is written
        here, on the first iteration, so that a refusal is an error of the stream."""
        call = make_call(self.settings.model or request.model)
        if request.stream:
            async with self.endpoints.first_answer(request, call.path, call.body, _opened, streaming=True) as opened:
                relayed = relay_stream(
                    opened.reply, call, self.settings, self.pool, opened.endpoint, opened.total_deadline, request.model
                )
                async for event in relayed:
                    yield _redacted(event, opened.redact)
            return

        async def read_events(reply: Reply, endpoint: Endpoint, total_deadline: float) -> list[Event]:
            return await read_whole(reply, call, self.settings, endpoint, total_deadline)

        async with self.endpoints.first_answer(request, call.path, call.body, read_events, streaming=False) as whole:
            for event in whole.value:
                yield _redacted(event, whole.redact)

    # -- internals ------------------------------------------------------------------------

    def headers_for(self, endpoint: Endpoint, request: Request | EmbedRequest | None = None) -> tuple[dict[str, str], Redactor]:
        """Headers for ``endpoint``, and what to blank out of what it answers. The
        Authorization is the client's (with ``forward_auth``), else the configured
        key, else the credentials the endpoint's URL carried."""
        headers = self._headers
        forwarded = request.authorization if request is not None and self.settings.forward_auth else None
        if forwarded:
            headers = {**headers, **self.auth_headers(forwarded)}
        elif endpoint.authorization and not self._secret:
            headers = {**headers, "authorization": endpoint.authorization}
        return headers, Redactor([self._secret, *endpoint.secrets, *bearer_secrets(forwarded)])

    async def _get_models_body(self, endpoint: Endpoint) -> bytes:
        headers = {k: v for k, v in self.headers_for(endpoint)[0].items() if k != "content-type"}
        client = self.endpoints.client_for(endpoint)
        return await get_json_body(
            client, endpoint.url + self.models_path, headers, DISCOVERY_TIMEOUT, max_bytes=self.settings.max_reply_bytes
        )

    async def _fetch_models(self) -> dict[str, ModelDetails]:
        body = await self._get_models_body(self.pool.order()[0])
        try:
            return self.parse_models(body)
        except RecursionError:
            raise BackendError(f"the model list {TOO_DEEP}") from None


async def _opened(reply: Reply, endpoint: Endpoint, total_deadline: float) -> None:
    """A stream counts as answered once its first bytes arrive; the rest is relayed."""
    return None


def _redacted(event: Event, redact: Redactor) -> Event:
    if isinstance(event, ErrorEvent) and redact:
        return msgspec.structs.replace(event, message=redact.text(event.message))
    return event



__all__ = ["Call", "HttpUpstreamBackend", "StreamDecoder"]
