"""Dialect-neutral plumbing between a route and a backend, for chats and completions.

A route decodes its dialect into a canonical request (a :class:`ChatRequest` or a
:class:`CompletionRequest`: one path for both), then calls :func:`start_chat`,
which resolves the model, applies its defaults and limits, checks capabilities and
pulls the first event, so that failures before any output are real HTTP errors, and
:func:`answer`, which streams the rest through the dialect's encoder or aggregates it
into one reply (the :class:`~dragoman.adapters.reply.ReplyFormat` the request asked for).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import TypeVar

import msgspec
import structlog
from litestar import Response
from litestar.response import Stream
from litestar.types import Receive

from dragoman.adapters.aggregate import ChatResult, ResultBuilder
from dragoman.adapters.canonical import ChatRequest, ErrorEvent, Event, Finish, Message, RoleStart, Secret, TextPart
from dragoman.adapters.reply import ReplyFormat, StreamEncoder
from dragoman.adapters.errors import BackendError, BackendTimeout, DragomanError, ModelNotFound, UnsupportedFeature, error_for_status
from dragoman.backends.base import Backend, Relay, TokenCounter, check_capabilities
from dragoman.config import ModelRoute
from dragoman.proxy.keepalive import KeepAlive, with_keepalive
from dragoman.proxy.limits import R, check_grammars, check_request, check_request_shape, clamp_to_context
from dragoman.proxy.models import ModelTable
from dragoman.proxy.record import RequestRecord

log = structlog.get_logger("dragoman.chat")

E = TypeVar("E", bound=StreamEncoder)
# What a stateful dialect does to a reply as it leaves (Responses stores it): the frames
# with the encoder that writes them, or the aggregate whose body it returns.
FrameTap = Callable[[AsyncIterator[bytes], E], AsyncIterator[bytes]]
BodyTap = Callable[[ChatResult], Awaitable[bytes]]


class ClientDisconnected(DragomanError):
    """Nobody is left to read the answer (nginx's 499)."""

    status = 499


class Chat:
    """A started chat: the first event already pulled, the rest still to come."""

    __slots__ = ("route", "backend", "first", "events", "deadline", "_release", "_table", "_closed")

    def __init__(
        self, route: ModelRoute, backend: Backend, first: Event, events: AsyncIterator[Event],
        deadline: float | None, release: Callable[[], None], table: ModelTable,
    ) -> None:
        self.route = route
        self.backend = backend
        self.first = first
        self.events = events
        self.deadline = deadline  # time.monotonic() by which the request must be done
        self._release = release
        self._table = table
        self._closed = False

    async def next(self) -> Event | None:
        """The next event, or None at the end; a deadline (the request timeout, or the
        end of the shutdown grace period) turns a wait past it into an error."""
        deadline = _earliest(self.deadline, self._table.lifetime.deadline)
        if deadline is None:
            return await anext(self.events, None)
        remaining = deadline - time.monotonic()
        try:
            async with asyncio.timeout(max(remaining, 0)):
                return await anext(self.events, None)
        except TimeoutError:
            if self._table.lifetime.draining:
                raise BackendError("server is shutting down; the reply was cut short", status=503) from None
            raise BackendTimeout(f"model '{self.route.config.name}': request timed out") from None

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await _close(self.events)
        finally:
            self._release()


def with_default_system(request: R, system: str | None) -> R:
    """The entry's system prompt, as Ollama applies its SYSTEM: a chat whose first
    message is not a system message gets it first; a templated completion without its
    own ``system`` gets it as that (raw and fill-in-the-middle prompts never)."""
    if not system:
        return request
    if isinstance(request, ChatRequest):
        if request.messages and request.messages[0].role == "system":
            return request
        return msgspec.structs.replace(request, messages=[Message(role="system", parts=[TextPart(system)]), *request.messages])
    if request.templated and not request.system:
        return msgspec.structs.replace(request, system=system)
    return request


def prepare(table: ModelTable, request: R, record: RequestRecord) -> tuple[ModelRoute, Backend, R]:
    if record.key_policy is not None and not record.key_policy.allows(request.model):
        raise ModelNotFound(request.model)  # as OpenAI answers a model a key may not use: it does not exist for it
    route, backend = table.lookup(request.model)
    record.model = request.model
    record.entry = route.config.name
    record.backend = route.config.backend
    check_request(request, table.limits)
    check_request_shape(request, table.limits, record.dialect)
    check_grammars(request, table.limits.schema, record.dialect)
    request = msgspec.structs.replace(request, options=request.options.merged(route.config.defaults))
    request = with_default_system(request, route.config.system)
    request = clamp_to_context(request, route.config.context_length)
    check_capabilities(request, backend.capabilities(request.model), request.model)
    return route, backend, request


async def start_chat(
    table: ModelTable, request: R, record: RequestRecord, *, authorization: str | None = None
) -> Chat:
    table.lifetime.check_accepting()
    route, backend, request = prepare(table, request, record)
    if authorization is not None:
        request = msgspec.structs.replace(request, authorization=Secret(authorization))
    timeout = table.limits.request_timeout
    deadline = time.monotonic() + timeout if timeout is not None else None
    release = await table.admit(route)
    table.lifetime.in_flight += 1

    def done() -> None:
        table.lifetime.in_flight -= 1
        release()

    events = aiter(backend.chat(request) if isinstance(request, ChatRequest) else backend.complete(request))
    chat = Chat(route, backend, RoleStart(), events, deadline, done, table)
    try:
        first = await chat.next()
    except BaseException:
        await chat.close()
        raise
    if first is None:
        first = Finish()
    if isinstance(first, ErrorEvent):
        await chat.close()
        raise error_for_status(first.status, first.message, retry_after=first.retry_after)
    record.mark(first)
    chat.first = first
    return chat


async def count_tokens(table: ModelTable, request: ChatRequest, record: RequestRecord) -> int:
    """The prompt's length in the model's tokens, by the backend's own tokenizer (or its
    upstream's count); a backend that has none refuses with a 400."""
    route, backend, request = prepare(table, request, record)
    if not isinstance(backend, TokenCounter):
        name = route.config.name
        message = f"model '{request.model}' ({route.config.backend} backend, entry '{name}') cannot count tokens: it has no tokenizer here"
        raise UnsupportedFeature(message, param="model")
    if isinstance(backend, Relay):  # the upstream counts: no work here
        return await backend.count_tokens(request)
    async with table.counting.slot(request.model):
        return await backend.count_tokens(request)


async def answer(
    chat: Chat,
    reply: ReplyFormat[E],
    record: RequestRecord,
    receive: Receive,
    *,
    frames: FrameTap[E] | None = None,
    body: BodyTap | None = None,
) -> Response[bytes] | Stream:
    """The one way every chat and completion route answers a started chat: the dialect's
    frames when the client asked for a stream, else the body that aggregates the same
    events. ``frames`` and ``body`` let a route act on the reply as it leaves."""
    if reply.stream:
        encoder = reply.stream_encoder()
        stream = encode_stream(chat, encoder, record)
        return Stream(frames(stream, encoder) if frames else stream, media_type=encoder.media_type)
    result = await collect(chat, record, receive)
    rendered = await body(result) if body else reply.render(result)
    return Response(rendered, media_type="application/json")


def encode_stream(chat: Chat, encoder: StreamEncoder, record: RequestRecord) -> AsyncIterator[bytes]:
    """Frames of a streaming reply, with keep-alive frames while it is quiet where the
    dialect has one (:mod:`proxy.keepalive`)."""
    frames = _encoded(chat, encoder, record)
    interval = chat._table.config.server.stream_keepalive
    if interval and isinstance(encoder, KeepAlive):
        return with_keepalive(frames, interval, encoder.keepalive())
    return frames


async def _encoded(chat: Chat, encoder: StreamEncoder, record: RequestRecord) -> AsyncIterator[bytes]:
    """Frames of a streaming reply. A failure after the first frame becomes an error
    frame followed by the terminator: the client always sees a well-formed end."""
    try:
        event: Event | None = chat.first
        while event is not None:
            if isinstance(event, ErrorEvent):
                record.error = event.message
                yield encoder.error(error_for_status(event.status, event.message))
                break
            if isinstance(event, Finish):
                record.usage, record.finish_reason, record.timings = event.usage, event.reason, event.timings
            frame = encoder.encode(event)
            if frame:
                yield frame
            event = await chat.next()
            if event is not None and record.first_token_at is None:
                record.mark(event)
    except DragomanError as err:
        record.error = err.message
        yield encoder.error(err)
    except Exception as exc:  # a backend bug must not cut the stream mid-frame
        log.exception("backend failed mid-stream", model=record.model)
        record.error = str(exc)
        yield encoder.error(BackendError(f"backend failed: {type(exc).__name__}: {exc}"))
    finally:
        await chat.close()
    tail = encoder.close()
    if tail:
        yield tail


async def collect(chat: Chat, record: RequestRecord, receive: Receive) -> ChatResult:
    """The whole reply, stopping the backend if the client disconnects meanwhile."""

    async def fold() -> ChatResult:
        builder = ResultBuilder()
        builder.add(chat.first)
        while (event := await chat.next()) is not None:
            if record.first_token_at is None:
                record.mark(event)
            builder.add(event)
        return builder.result()

    work = asyncio.ensure_future(fold())
    gone = asyncio.ensure_future(_wait_disconnect(receive))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not work.done():
            work.cancel()  # closes the backend's iterator at its current await
            await asyncio.wait({work})
    try:
        if work.cancelled():
            record.error = "client disconnected"
            raise ClientDisconnected("client disconnected before the reply was complete")
        result = work.result()
    finally:
        await chat.close()
    record.usage, record.finish_reason, record.timings = result.usage, result.finish_reason, result.timings
    return result


def _earliest(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


async def _wait_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _close(events: AsyncIterator[Event]) -> None:
    if isinstance(events, AsyncGenerator):
        try:
            await events.aclose()
        except Exception as exc:  # closing is cleanup; report, do not mask the answer
            log.warning("closing backend stream failed", error=str(exc))
