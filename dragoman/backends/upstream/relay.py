"""Reading an upstream's reply as canonical events: a stream relayed as it arrives,
bounded by the idle and total deadlines, or a whole reply read at once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Protocol

import aiohttp
import msgspec

from dragoman.adapters.canonical import ContentDelta, ErrorEvent, Event, ThinkingDelta
from dragoman.backends.upstream.endpoints import Endpoint, EndpointPool
from dragoman.backends.upstream.exchange import TRANSPORT_ERRORS, LineSplitter, LineTooLong, Reply, describe, read_rest
from dragoman.backends.upstream.settings import UpstreamSettings
from dragoman.backends.upstream.watch import ReadWatch


class StreamDecoder(Protocol):
    def feed(self, line: bytes) -> list[Event]: ...

    def finish(self) -> list[Event]: ...


class Call(msgspec.Struct, frozen=True):
    """One request to the upstream: where it goes, what it sends, how its reply reads."""

    path: str
    body: bytes
    decoder: Callable[[], StreamDecoder]
    parse: Callable[[bytes], list[Event]]  # a whole (non-streaming) reply


async def read_whole(
    reply: Reply, call: Call, settings: UpstreamSettings, endpoint: Endpoint, total_deadline: float
) -> list[Event]:
    """The events of a whole reply. Servers that stream although asked not to are
    read as the stream they sent."""
    s = settings
    try:
        body = await read_rest(reply, s.idle_timeout, total_deadline, max_bytes=s.max_reply_bytes, upstream=endpoint.label)
    finally:
        await reply.aclose()
    content_type = reply.header("content-type")
    if "text/event-stream" not in content_type and "ndjson" not in content_type:
        return call.parse(body)
    decoder = call.decoder()
    events = [event for line in body.split(b"\n") for event in decoder.feed(line)]
    return events + decoder.finish()


async def relay_stream(
    reply: Reply,
    call: Call,
    settings: UpstreamSettings,
    pool: EndpointPool,
    endpoint: Endpoint,
    total_deadline: float,
    model: str,
) -> AsyncIterator[Event]:
    """The events of a streamed reply as its lines arrive; a broken or silent stream
    ends in an ``ErrorEvent`` (and counts against ``endpoint`` in ``pool``)."""
    decoder = call.decoder()
    splitter = LineSplitter(settings.max_line_bytes)
    coalesce = settings.coalesce
    watch = ReadWatch(settings.idle_timeout, total_deadline)
    chunk: bytes | None = reply.first
    try:
        while chunk is not None:
            try:
                lines = splitter.lines(chunk)
            except LineTooLong as exc:
                yield ErrorEvent(f"model '{model}': upstream {endpoint.label} {exc.message}", status=502)
                return
            events = [event for line in lines for event in decoder.feed(line)]
            if coalesce and len(events) > 1:
                events = coalesce_deltas(events)
            for event in events:
                yield event
            try:
                chunk = await watch.read(reply.chunks)
            except TimeoutError as exc:
                if isinstance(exc, aiohttp.ClientError):  # aiohttp's own, not our deadline
                    yield _lost(pool, endpoint, model, exc)
                    return
                seconds = getattr(settings, watch.expired or "idle_timeout")
                reason = f"sent nothing for {seconds:g}s ({watch.expired})"
                pool.failed(endpoint, reason)
                yield ErrorEvent(f"model '{model}': upstream {endpoint.label} {reason}", status=504)
                return
            except TRANSPORT_ERRORS as exc:
                yield _lost(pool, endpoint, model, exc)
                return
        for line in splitter.tail():
            for event in decoder.feed(line):
                yield event
        for event in decoder.finish():
            yield event
    finally:
        watch.close()
        await reply.aclose()


def coalesce_deltas(events: list[Event]) -> list[Event]:
    """Runs of text deltas of one kind merged into one delta (content keeps every
    token's logprobs). Applied to what arrived in one read: deltas the upstream sent
    faster than we forward them go out as one frame instead of one write each, and a
    stream that keeps up is left as it was."""
    merged: list[Event] = []
    for event in events:
        last = merged[-1] if merged else None
        if isinstance(event, ContentDelta) and isinstance(last, ContentDelta):
            logprobs = (last.logprobs or []) + (event.logprobs or []) if last.logprobs or event.logprobs else None
            merged[-1] = ContentDelta(last.text + event.text, logprobs)
        elif isinstance(event, ThinkingDelta) and isinstance(last, ThinkingDelta) and not (event.signature or last.signature):
            merged[-1] = ThinkingDelta(last.text + event.text)  # a signature closes the thinking: never merged away
        else:
            merged.append(event)
    return merged


def _lost(pool: EndpointPool, endpoint: Endpoint, model: str, exc: BaseException) -> ErrorEvent:
    reason = f"connection lost mid-reply: {describe(exc)}"
    pool.failed(endpoint, reason)
    return ErrorEvent(f"model '{model}': upstream {endpoint.label} {reason}", status=502)


__all__ = ["StreamDecoder", "coalesce_deltas", "read_whole", "relay_stream"]
