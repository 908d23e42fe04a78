"""Canonical results and events as Anthropic answers: one ``message`` body, or named SSE
events exactly as the API frames them.

A stream is ``message_start``, ``ping``, then per content block ``content_block_start``,
its deltas and ``content_block_stop`` (blocks one after another, never interleaved:
thinking, text, tool uses), then ``message_delta`` with the stop reason and usage, and
``message_stop``. A failure after the stream began is ``event: error`` with Anthropic's
error body, and nothing follows it.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from dragoman.adapters.aggregate import ChatResult
from dragoman.adapters.anthropic import wire
from dragoman.adapters.anthropic.ids import new_message_id, thinking_signature, tool_use_id
from dragoman.adapters.canonical import (
    ContentDelta,
    ErrorEvent,
    Event,
    Finish,
    FinishReason,
    Logprobs,
    RoleStart,
    ThinkingDelta,
    ToolCall,
    ToolCallDone,
    ToolCallFragment,
    Usage,
)
from dragoman.adapters.errors import ContextTooLong, DragomanError, error_for_status
from dragoman.adapters.reply import ModelReply
from dragoman.adapters.fragments import CallOpened, FragmentOpener, Step

SSE_MEDIA_TYPE = "text/event-stream"
OVERLOADED = 529  # Anthropic's status for "try again later"

_encoder = msgspec.json.Encoder()


def stop_reason(reason: FinishReason, *, tool_calls: bool, stop_sequence: str | None) -> str:
    if reason == "length":
        return "max_tokens"
    if tool_calls or reason == "tool_calls":
        return "tool_use"
    if stop_sequence is not None:
        return "stop_sequence"
    return "end_turn"


def reply_for(request: wire.MessagesRequest) -> ModelReply[StreamEncoder]:
    """The reply the request asked for: named SSE events when ``stream``, one body otherwise."""
    return ModelReply(request.model, bool(request.stream), StreamEncoder, render_response)


def render_response(result: ChatResult, model: str) -> bytes:
    """The ``message`` body of a non-streaming reply."""
    content: list[wire.ResponseBlock] = []
    if result.thinking:
        signature = result.thinking_signature or thinking_signature(result.thinking)
        content.append(wire.ThinkingBlock(thinking=result.thinking, signature=signature))
    if result.content or not (result.thinking or result.tool_calls):
        content.append(wire.TextBlock(text=result.content))
    content += [_tool_use(call) for call in result.tool_calls]
    message = wire.Message(
        id=new_message_id(),
        model=model,
        content=content,
        stop_reason=stop_reason(result.finish_reason, tool_calls=bool(result.tool_calls), stop_sequence=result.stop_sequence),
        stop_sequence=_reported_stop(result.finish_reason, result.stop_sequence, bool(result.tool_calls)),
        usage=_usage(result.usage),
    )
    return _encoder.encode(message)


def status_for(err: DragomanError) -> int:
    """Anthropic's status for an error: 529, not 503, for "overloaded, try later"."""
    return OVERLOADED if err.status == 503 else err.status


def error_type(status: int) -> str:
    return {
        400: "invalid_request_error",
        401: "authentication_error",
        402: "billing_error",
        403: "permission_error",
        404: "not_found_error",
        405: "invalid_request_error",
        413: "request_too_large",
        415: "invalid_request_error",
        422: "invalid_request_error",
        429: "rate_limit_error",
        503: "overloaded_error",
        504: "timeout_error",
        529: "overloaded_error",
    }.get(status, "api_error")


def render_error(err: DragomanError) -> bytes:
    """``{"type": "error", "error": {"type", "message"}}``."""
    return _encoder.encode(_error_body(err))


def error_message(err: DragomanError) -> str:
    """Anthropic's own words for a prompt that does not fit, which clients (Claude Code)
    recognise: ``prompt is too long: N tokens > M maximum``."""
    if isinstance(err, ContextTooLong) and err.prompt_tokens is not None and err.context_length is not None:
        words = f"prompt is too long: {err.prompt_tokens} tokens > {err.context_length} maximum"
        # A prompt far too long is not tokenised: its count is then a lower bound.
        return words + (f" (at least {err.prompt_tokens} tokens: {err.message})" if err.at_least else "")
    return err.message


class StreamEncoder:
    """Canonical events of one reply as Anthropic SSE events; one instance per response."""

    media_type = SSE_MEDIA_TYPE

    def __init__(self, model: str) -> None:
        self.model = model
        self.id = new_message_id()
        self._started = False
        self._ended = False
        self._index = -1  # index of the open (or last) block
        self._open: Literal["text", "thinking", "tool"] | None = None
        self._thinking: list[str] = []
        self._signed = False
        self._fragments = FragmentOpener()
        self._calls = 0

    def encode(self, event: Event) -> bytes:
        if self._ended:
            return b""
        head = b"" if self._started else self._start(event if isinstance(event, RoleStart) else RoleStart())
        if not isinstance(event, ToolCallFragment):
            head += self._steps(self._fragments.flush())  # a call whose name never came still goes out
            self._fragments.close()
        if isinstance(event, ContentDelta):
            return head + self._text(event.text) if event.text else head
        if isinstance(event, ThinkingDelta):
            return head + self._thinking_delta(event)
        if isinstance(event, ToolCallDone):
            return head + self._whole_call(event.call)
        if isinstance(event, ToolCallFragment):
            return head + self._steps(self._fragments.feed(event))
        if isinstance(event, Finish):
            return head + self._finish(event)
        if isinstance(event, ErrorEvent):
            return head + self.error(error_for_status(event.status, event.message, retry_after=event.retry_after))
        if isinstance(event, (RoleStart, Logprobs)):  # Anthropic has no logprobs
            return head
        raise TypeError(f"unknown event {event!r}")  # pragma: no cover - exhaustiveness

    def error(self, err: DragomanError) -> bytes:
        self._ended = True
        return _frame("error", _error_body(err))

    def close(self) -> bytes:
        return b""

    def keepalive(self) -> bytes:
        """Anthropic's own keep-alive event (clients skip it)."""
        return _frame("ping", wire.Ping())

    # -- blocks -------------------------------------------------------------------------

    def _start(self, first: RoleStart) -> bytes:
        """``message_start``, with the prompt's input_tokens when the backend knew them
        before the reply, as Anthropic sends them (Claude Code reads them there); else 0,
        and the count arrives in ``message_delta``, which always repeats it. A cache hit
        not known yet counts in input_tokens here and in cache_read_input_tokens at the
        end: the sum, the whole prompt, is the same."""
        self._started = True
        usage = _usage(Usage(first.prompt_tokens or 0, 0, first.cached_tokens, first.cache_write_tokens))
        message = wire.Message(id=self.id, model=self.model, content=[], stop_reason=None, stop_sequence=None, usage=usage)
        return _frame("message_start", wire.MessageStart(message=message)) + _frame("ping", wire.Ping())

    def _open_block(self, kind: Literal["text", "thinking", "tool"], block: wire.ResponseBlock) -> bytes:
        frames = self._close_block()
        self._index += 1
        self._open = kind
        return frames + _frame("content_block_start", wire.ContentBlockStart(index=self._index, content_block=block))

    def _close_block(self) -> bytes:
        if self._open is None:
            return b""
        frames = b""
        if self._open == "thinking" and not self._signed:
            # Every thinking block ends with a signature, which clients hand back.
            frames += self._delta(wire.SignatureDelta(signature=thinking_signature("".join(self._thinking))))
        self._open = None
        return frames + _frame("content_block_stop", wire.ContentBlockStop(index=self._index))

    def _delta(self, delta: wire.BlockDelta) -> bytes:
        return _frame("content_block_delta", wire.ContentBlockDelta(index=self._index, delta=delta))

    def _text(self, text: str) -> bytes:
        frames = b"" if self._open == "text" else self._open_block("text", wire.TextBlock(text=""))
        return frames + self._delta(wire.TextDelta(text=text))

    def _thinking_delta(self, event: ThinkingDelta) -> bytes:
        if not event.text and not event.signature:
            return b""
        frames = b""
        if self._open != "thinking":
            frames = self._open_block("thinking", wire.ThinkingBlock(thinking="", signature=""))
            self._thinking, self._signed = [], False
        if event.text:
            self._thinking.append(event.text)
            frames += self._delta(wire.ThinkingDeltaBody(thinking=event.text))
        if event.signature:
            self._signed = True
            frames += self._delta(wire.SignatureDelta(signature=event.signature))
        return frames

    def _whole_call(self, call: ToolCall) -> bytes:
        self._calls += 1
        block = wire.ToolUseBlock(id=tool_use_id(call.id), name=call.name, input={})
        frames = self._open_block("tool", block)
        frames += self._delta(wire.InputJSONDelta(partial_json=_encoder.encode(call.arguments).decode()))
        return frames + self._close_block()

    def _steps(self, steps: list[Step]) -> bytes:
        """Fragments as ``input_json_delta`` pieces of one tool_use block per call."""
        frames = b""
        for step in steps:
            if isinstance(step, CallOpened):
                self._calls += 1
                frames += self._open_block("tool", wire.ToolUseBlock(id=tool_use_id(step.call_id), name=step.name, input={}))
            if step.arguments:
                frames += self._delta(wire.InputJSONDelta(partial_json=step.arguments))
        return frames

    def _finish(self, event: Finish) -> bytes:
        frames = self._close_block()
        self._ended = True
        tools = self._calls > 0
        body = wire.MessageDeltaBody(
            stop_reason=stop_reason(event.reason, tool_calls=tools, stop_sequence=event.stop_sequence),
            stop_sequence=_reported_stop(event.reason, event.stop_sequence, tools),
        )
        whole = _usage(event.usage)
        usage = wire.DeltaUsage(
            output_tokens=whole.output_tokens,
            input_tokens=whole.input_tokens,
            cache_creation_input_tokens=whole.cache_creation_input_tokens,
            cache_read_input_tokens=whole.cache_read_input_tokens,
        )
        return frames + _frame("message_delta", wire.MessageDelta(delta=body, usage=usage)) + _frame("message_stop", wire.MessageStop())


def _usage(usage: Usage) -> wire.Usage:
    """Anthropic counts cache reads and cache writes apart: ``input_tokens`` are the rest
    of the prompt, the whole prompt is the sum of the three (the canonical count, like
    OpenAI's, holds both). Writes come only from an upstream: local caching is automatic.
    Never below 0, whatever an upstream's figures say."""
    read, written = usage.cached_tokens or 0, usage.cache_write_tokens or 0
    return wire.Usage(
        input_tokens=max(0, usage.prompt_tokens - read - written),
        output_tokens=usage.completion_tokens,
        cache_creation_input_tokens=written,
        cache_read_input_tokens=read,
    )


def _reported_stop(reason: FinishReason, stop_sequence: str | None, tool_calls: bool) -> str | None:
    return stop_sequence if stop_reason(reason, tool_calls=tool_calls, stop_sequence=stop_sequence) == "stop_sequence" else None


def _tool_use(call: ToolCall) -> wire.ToolUseBlock:
    return wire.ToolUseBlock(id=tool_use_id(call.id), name=call.name, input=call.arguments)


def _error_body(err: DragomanError) -> wire.ErrorResponse:
    return wire.ErrorResponse(error=wire.ErrorDetail(type=error_type(status_for(err)), message=error_message(err)))


def _frame(name: str, payload: msgspec.Struct) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + _encoder.encode(payload) + b"\n\n"


__all__ = ["StreamEncoder", "error_message", "error_type", "render_error", "render_response", "status_for", "stop_reason"]
