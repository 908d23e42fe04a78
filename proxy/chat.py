"""Dialect-neutral chat plumbing between a route and a backend.

A route decodes its dialect into a canonical request, then calls :func:`start_chat`,
which resolves the model, applies its defaults, checks capabilities and pulls the
first event, so that failures before any output are real HTTP errors. What follows
is either streamed through an encoder or aggregated into one reply.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Protocol

import msgspec
import structlog

from adapters.aggregate import ChatResult, ResultBuilder
from adapters.canonical import ChatRequest, ErrorEvent, Event, Finish, Secret
from adapters.errors import BackendError, DragomanError, error_for_status
from backends.base import Backend, check_capabilities
from config import ModelRoute
from proxy.models import ModelTable
from proxy.record import RequestRecord

log = structlog.get_logger("dragoman.chat")


class ClientDisconnected(DragomanError):
    """Nobody is left to read the answer (nginx's 499)."""

    status = 499


class StreamEncoder(Protocol):
    media_type: str

    def encode(self, event: Event) -> bytes: ...

    def error(self, err: DragomanError) -> bytes: ...

    def close(self) -> bytes: ...


class Chat(msgspec.Struct):
    """A started chat: the first event already pulled, the rest still to come."""

    route: ModelRoute
    backend: Backend
    first: Event
    events: AsyncIterator[Event]


def prepare(table: ModelTable, request: ChatRequest, record: RequestRecord) -> tuple[ModelRoute, Backend, ChatRequest]:
    route, backend = table.lookup(request.model)
    record.model = request.model
    record.backend = route.config.backend
    request = msgspec.structs.replace(request, options=request.options.merged(route.config.defaults))
    check_capabilities(request, backend.capabilities(request.model), request.model)
    return route, backend, request


async def start_chat(
    table: ModelTable, request: ChatRequest, record: RequestRecord, *, authorization: str | None = None
) -> Chat:
    route, backend, request = prepare(table, request, record)
    if authorization is not None:
        request = msgspec.structs.replace(request, authorization=Secret(authorization))
    events = aiter(backend.chat(request))
    try:
        first = await anext(events)
    except StopAsyncIteration:
        first = Finish()
    except BaseException:
        await _close(events)
        raise
    if isinstance(first, ErrorEvent):
        await _close(events)
        raise error_for_status(first.status, first.message, retry_after=first.retry_after)
    return Chat(route=route, backend=backend, first=first, events=events)


async def encode_stream(chat: Chat, encoder: StreamEncoder, record: RequestRecord) -> AsyncIterator[bytes]:
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
                record.usage = event.usage
            frame = encoder.encode(event)
            if frame:
                yield frame
            event = await anext(chat.events, None)
    except DragomanError as err:
        record.error = err.message
        yield encoder.error(err)
    except Exception as exc:  # a backend bug must not cut the stream mid-frame
        log.exception("backend failed mid-stream", model=record.model)
        record.error = str(exc)
        yield encoder.error(BackendError(f"backend failed: {type(exc).__name__}: {exc}"))
    finally:
        await _close(chat.events)
    tail = encoder.close()
    if tail:
        yield tail


async def collect(chat: Chat, record: RequestRecord, receive: Any) -> ChatResult:
    """The whole reply, stopping the backend if the client disconnects meanwhile."""

    async def fold() -> ChatResult:
        builder = ResultBuilder()
        builder.add(chat.first)
        async for event in chat.events:
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
    if work.cancelled():
        record.error = "client disconnected"
        await _close(chat.events)
        raise ClientDisconnected("client disconnected before the reply was complete")
    try:
        result = work.result()
    finally:
        await _close(chat.events)
    record.usage = result.usage
    return result


async def _wait_disconnect(receive: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _close(events: AsyncIterator[Event]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        try:
            await aclose()
        except Exception as exc:  # closing is cleanup; report, do not mask the answer
            log.warning("closing backend stream failed", error=str(exc))
