"""OpenAI's ``n`` on the chat route: ``n`` canonical requests started together, so a
batch engine admits them into one batch and decodes them together, then merged into
one reply (:mod:`adapters.openai.choices` writes it). A failure of any choice before
the reply began is the request's error, and the others are closed; after, an error
frame ends the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import structlog
from litestar import Response
from litestar.response import Stream
from litestar.types import Receive

from dragoman.adapters.aggregate import ChatResult, ResultBuilder
from dragoman.adapters.canonical import ChatRequest, ErrorEvent, Event
from dragoman.adapters.errors import BackendError, DragomanError, error_for_status
from dragoman.adapters.openai import stream as openai_stream
from dragoman.adapters.openai.choices import ChoicesEncoder, choice_requests, choices_usage
from dragoman.proxy.chat import Chat, ClientDisconnected, start_chat
from dragoman.proxy.keepalive import with_keepalive
from dragoman.proxy.models import ModelTable
from dragoman.proxy.record import RequestRecord

log = structlog.get_logger("dragoman.chat")

_END = None  # a choice's last item on the merge queue


async def answer_choices(
    table: ModelTable,
    request: ChatRequest,
    n: int,
    record: RequestRecord,
    receive: Receive,
    *,
    model: str,
    include_usage: bool,
    authorization: str | None,
) -> Response[bytes] | Stream:
    chats = await start_choices(table, choice_requests(request, n), record, authorization)
    if request.stream:
        encoder = ChoicesEncoder(model, n, include_usage=include_usage)
        frames = merged_stream(chats, encoder, record)
        if interval := table.config.server.stream_keepalive:
            frames = with_keepalive(frames, interval, encoder.keepalive())
        return Stream(frames, media_type=encoder.media_type)
    results = await collect_choices(chats, record, receive)
    body = openai_stream.render_choices(results, model, usage=choices_usage([r.usage for r in results]))
    return Response(body, media_type="application/json")


async def start_choices(
    table: ModelTable, requests: list[ChatRequest], record: RequestRecord, authorization: str | None
) -> list[Chat]:
    started = await asyncio.gather(
        *(start_chat(table, r, record, authorization=authorization) for r in requests), return_exceptions=True
    )
    chats = [c for c in started if isinstance(c, Chat)]
    failure = next((c for c in started if isinstance(c, BaseException)), None)
    if failure is not None:
        for chat in chats:
            await chat.close()
        raise failure
    return chats


async def collect_choices(chats: list[Chat], record: RequestRecord, receive: Receive) -> list[ChatResult]:
    """Every choice whole, all stopped if the client disconnects meanwhile."""

    async def fold(chat: Chat) -> ChatResult:
        builder = ResultBuilder()
        builder.add(chat.first)
        while (event := await chat.next()) is not None:
            record.mark(event)
            builder.add(event)
        return builder.result()

    work = asyncio.ensure_future(asyncio.gather(*(fold(c) for c in chats)))
    gone = asyncio.ensure_future(_disconnected(receive))
    either: set[asyncio.Future[Any]] = {work, gone}
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not work.done():
            work.cancel()
            await asyncio.wait({work})
    try:
        if work.cancelled():
            record.error = "client disconnected"
            raise ClientDisconnected("client disconnected before the reply was complete")
        results = work.result()
    finally:
        for chat in chats:
            await chat.close()
    record.usage = choices_usage([r.usage for r in results])
    return results


async def merged_stream(chats: list[Chat], encoder: ChoicesEncoder, record: RequestRecord) -> AsyncIterator[bytes]:
    """Each choice's frames as they come; an error in any ends the stream."""
    queue: asyncio.Queue[tuple[int, Event | DragomanError | None]] = asyncio.Queue(maxsize=8 * len(chats))
    pumps = [asyncio.ensure_future(_pump(i, chat, queue)) for i, chat in enumerate(chats)]
    running = len(chats)
    try:
        while running:
            index, item = await queue.get()
            if item is _END:
                running -= 1
                continue
            if isinstance(item, (ErrorEvent, DragomanError)):
                err = error_for_status(item.status, item.message) if isinstance(item, ErrorEvent) else item
                record.error = err.message
                yield encoder.error(err)
                break
            record.mark(item)
            frame = encoder.encode(index, item)
            if frame:
                yield frame
    finally:
        for pump in pumps:
            pump.cancel()
        for pump in pumps:
            with contextlib.suppress(BaseException):
                await pump
        for chat in chats:
            await chat.close()
        record.usage = encoder.usage
    yield encoder.close()


async def _pump(index: int, chat: Chat, queue: asyncio.Queue[tuple[int, Event | DragomanError | None]]) -> None:
    try:
        event: Event | None = chat.first
        while event is not None:
            await queue.put((index, event))
            if isinstance(event, ErrorEvent):
                return
            event = await chat.next()
    except DragomanError as err:
        await queue.put((index, err))
    except Exception as exc:  # a backend bug must not cut the stream mid-frame
        log.exception("backend failed mid-stream", choice=index)
        await queue.put((index, BackendError(f"backend failed: {type(exc).__name__}: {exc}")))
    # Not in a finally: a cancelled pump's reader is gone, and nothing waits for its end.
    await queue.put((index, _END))


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
