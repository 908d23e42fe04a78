"""Canonical events → Ollama's NDJSON reply to a client, streamed or whole (an upstream
Ollama server's reply is read in :mod:`adapters.ollama.upstream_reply`).

Clients get whole tool calls with object arguments, never argument fragments: fragments
from OpenAI-style upstreams are accumulated here and a call is written as soon as it is
complete. ``created_at`` is the real time of each object, with nanoseconds, as Go writes it.
"""

from __future__ import annotations

import functools
import math
import secrets
import time
from collections.abc import Callable
from typing import Literal

import msgspec

from dragoman.adapters.aggregate import ChatResult, MalformedToolCall, ToolCallAccumulator
from dragoman.adapters.canonical import (
    ContentDelta,
    ErrorEvent,
    Event,
    Finish,
    FinishReason,
    Logprobs,
    RoleStart,
    ThinkingDelta,
    Timings,
    TokenLogprob,
    ToolCall,
    ToolCallDone,
    ToolCallFragment,
    Usage,
)
from dragoman.adapters.errors import DragomanError
from dragoman.adapters.reply import ModelReply
from dragoman.adapters.ollama import wire
from dragoman.adapters.ollama.convert import wire_tool_call

_encoder = msgspec.json.Encoder()
_ASSISTANT_EMPTY = wire.ResponseMessage(role="assistant", content="")
# A token the model rules out has logprob -inf; JSON cannot say so, and the null msgspec
# would write fails ollama-python's validation. OpenAI's stand-in is used instead.
IMPOSSIBLE_LOGPROB = -9999.0
# Ollama has no "tool_calls" done_reason: a reply with calls simply stops.
_DONE_REASON: dict[FinishReason, str] = {
    "stop": "stop",
    "tool_calls": "stop",
    "length": "length",
    "load": "load",
    "unload": "unload",
}


def created_at(ns: int | None = None) -> str:
    """RFC 3339 UTC with nanoseconds: ``2026-11-29T18:07:06.123456789Z``."""
    seconds, nanos = divmod(time.time_ns() if ns is None else ns, 1_000_000_000)
    return f"{_second(seconds)}.{nanos:09d}Z"


@functools.lru_cache(maxsize=4)
def _second(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


# -- canonical events → client NDJSON ---------------------------------------------------


class StreamEncoder:
    """One per streamed reply: each canonical event becomes zero or more NDJSON lines."""

    media_type = "application/x-ndjson"

    def __init__(self, model: str, *, include_usage: bool = False) -> None:
        del include_usage  # Ollama's final line always carries the counts
        self._model = model
        self._calls_sent = 0
        self._fragments = ToolCallAccumulator()
        self._failed = False

    def encode(self, event: Event) -> bytes:
        if self._failed:
            return b""
        if isinstance(event, ContentDelta):
            if not event.text and not event.logprobs:
                return b""
            logprobs = wire_logprobs(event.logprobs) if event.logprobs else None
            return encode_line(self._chunk(content=event.text, logprobs=logprobs))
        if isinstance(event, ThinkingDelta):
            return encode_line(self._chunk(thinking=event.text)) if event.text else b""
        if isinstance(event, ToolCallDone):
            return self._calls([event.call])
        if isinstance(event, ToolCallFragment):
            return self._complete_calls(lambda: self._fragments.add(event))
        if isinstance(event, Logprobs):
            return encode_line(self._chunk(logprobs=wire_logprobs(event.tokens)))
        if isinstance(event, Finish):
            return self._complete_calls(self._fragments.finish) + self._finish(event)
        if isinstance(event, ErrorEvent):
            self._failed = True
            return _error_line(event.message)
        if isinstance(event, RoleStart):
            return b""
        raise TypeError(f"unknown event {event!r}")  # pragma: no cover - exhaustiveness

    def error(self, err: DragomanError) -> bytes:
        self._failed = True
        return _error_line(err.message)

    def close(self) -> bytes:
        return b""

    # -- the shape of a line: /api/chat's here, /api/generate's in a subclass --

    def _chunk(
        self,
        *,
        content: str = "",
        thinking: str | None = None,
        tool_calls: list[wire.ToolCall] | None = None,
        logprobs: list[wire.Logprob] | None = None,
    ) -> msgspec.Struct:
        message = wire.ResponseMessage(role="assistant", content=content, thinking=thinking, tool_calls=tool_calls)
        return wire.ChatResponse(
            model=self._model, created_at=created_at(), message=message, done=False, logprobs=logprobs
        )

    def _last(self, event: Finish) -> msgspec.Struct:
        return _final(self._model, _ASSISTANT_EMPTY, event.reason, event.usage, event.timings)

    # -- internals --

    def _complete_calls(self, complete: Callable[[], list[ToolCall]]) -> bytes:
        try:
            calls = complete()
        except MalformedToolCall as exc:
            self._failed = True
            return _error_line(exc.message)
        return self._calls(calls)

    def _calls(self, calls: list[ToolCall]) -> bytes:
        lines = []
        for call in calls:
            lines.append(encode_line(self._chunk(tool_calls=[numbered_call(call, self._calls_sent)])))
            self._calls_sent += 1
        return b"".join(lines)

    def _finish(self, event: Finish) -> bytes:
        if self._failed:
            return b""
        return encode_line(self._last(event))


def numbered_call(call: ToolCall, index: int) -> wire.ToolCall:
    # Indices count calls in order of completion: local parsers leave them all 0.
    return wire_tool_call(msgspec.structs.replace(call, id=call.id or new_call_id()), index)


def done_reason(reason: FinishReason) -> str:
    return _DONE_REASON[reason]


def _final(
    model: str,
    message: wire.ResponseMessage,
    reason: FinishReason,
    usage: Usage,
    timings: Timings,
    logprobs: list[wire.Logprob] | None = None,
) -> wire.ChatResponse:
    reply = wire.ChatResponse(
        model=model,
        created_at=created_at(),
        message=message,
        done=True,
        done_reason=_DONE_REASON[reason],
        logprobs=logprobs,
    )
    return wire.with_counts(reply, usage, timings)


def wire_logprobs(tokens: list[TokenLogprob]) -> list[wire.Logprob]:
    return [
        wire.Logprob(
            token=t.token,
            logprob=_finite(t.logprob),
            bytes=t.bytes,
            top_logprobs=[wire.TokenLogprob(token=a.token, logprob=_finite(a.logprob), bytes=a.bytes) for a in t.top_logprobs]
            or None,
        )
        for t in tokens
    ]


def _finite(logprob: float) -> float:
    return logprob if math.isfinite(logprob) else IMPOSSIBLE_LOGPROB


def encode_line(value: msgspec.Struct) -> bytes:
    return _encoder.encode(value) + b"\n"


def _error_line(message: str) -> bytes:
    return encode_line(wire.ErrorResponse(error=message))


# -- whole replies ------------------------------------------------------------------------


def reply_for(request: wire.ChatRequest) -> ModelReply[StreamEncoder]:
    """The reply the request asked for: NDJSON lines unless ``stream`` is false (a
    ``null`` streams, as in Ollama), one body otherwise."""
    return ModelReply(request.model, request.stream is not False, StreamEncoder, render_response)


def render_response(result: ChatResult, model: str) -> bytes:
    """The non-streaming ``/api/chat`` reply."""
    message = wire.ResponseMessage(
        role="assistant",
        content=result.content,
        thinking=result.thinking or None,
        tool_calls=[numbered_call(c, i) for i, c in enumerate(result.tool_calls)] or None,
    )
    logprobs = wire_logprobs(result.logprobs) if result.logprobs else None
    return _encoder.encode(_final(model, message, result.finish_reason, result.usage, result.timings, logprobs))


def render_load_response(model: str, done_reason: Literal["load", "unload"]) -> bytes:
    """The reply to empty ``messages``: the model was loaded (or, keep_alive 0, unloaded)."""
    reply = wire.ChatResponse(
        model=model, created_at=created_at(), message=_ASSISTANT_EMPTY, done=True, done_reason=done_reason
    )
    return _encoder.encode(reply)


def render_error(err: DragomanError) -> bytes:
    return _encoder.encode(wire.ErrorResponse(error=err.message))


__all__ = [
    "IMPOSSIBLE_LOGPROB",
    "StreamEncoder",
    "created_at",
    "done_reason",
    "encode_line",
    "new_call_id",
    "numbered_call",
    "render_error",
    "render_load_response",
    "render_response",
    "wire_logprobs",
]
