"""What an Anthropic-speaking upstream answers, as canonical events.

A stream is read one SSE line at a time; only ``data:`` lines matter (each carries its
``type``). Content blocks map one to one: text and thinking deltas as they come, a
signature as a signed empty thinking delta, a ``tool_use`` block as fragments of one
call (its start carries id and name, ``input_json_delta`` pieces the arguments).
Anything unreadable becomes an ``ErrorEvent``, never an exception out of the decoder.
"""

from __future__ import annotations

import msgspec

from dragoman.adapters.anthropic import wire
from dragoman.adapters.canonical import (
    ContentDelta,
    ErrorEvent,
    Event,
    Finish,
    FinishReason,
    RoleStart,
    ThinkingDelta,
    ToolCall,
    ToolCallDone,
    ToolCallFragment,
    Usage,
)
from dragoman.adapters.errors import DragomanError, error_for_status
from dragoman.adapters.upstream_json import Unreadable, read_json, sse_data

BAD_GATEWAY = 502
_STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    # pause_turn (a server tool paused) and refusal end the reply like a stop.
}
# Anthropic's error types, as the status a client would have got.
_ERROR_STATUS = {"invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
                 "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429,
                 "overloaded_error": 503, "timeout_error": 504}  # fmt: skip
_decoder = msgspec.json.Decoder(wire.UpstreamEvent)


def parse_upstream_response(body: bytes) -> list[Event]:
    """A whole ``message`` as the events a stream would have carried."""
    try:
        reply = read_json(_decoder.decode, body)
    except Unreadable as exc:
        return [ErrorEvent(f"upstream sent a reply {exc}", status=BAD_GATEWAY)]
    if reply.type == "error" or reply.error is not None:
        return [_error_event(reply.error)]
    events: list[Event] = [RoleStart()]
    calls = 0
    for block in reply.content or ():
        if block.type == "text" and block.text:
            events.append(ContentDelta(block.text))
        elif block.type == "thinking":
            events.append(ThinkingDelta(block.thinking or "", signature=block.signature or None))
        elif block.type == "tool_use":
            events.append(ToolCallDone(ToolCall(name=block.name or "", arguments=block.input or {}, id=block.id, index=calls)))
            calls += 1
    usage = reply.usage or wire.UpstreamUsage()
    events.append(_finish(reply.stop_reason, reply.stop_sequence, usage))
    return events


def parse_upstream_error(status: int, body: bytes) -> DragomanError:
    """``{"type": "error", "error": {"type", "message"}}`` with the upstream's status (529 is
    503, the canonical "try later")."""
    message: str | None = None
    try:
        detail = read_json(_decoder.decode, body).error
        message = detail.message if detail is not None else None
    except Unreadable:
        pass
    text = message or body.decode("utf-8", "replace").strip() or f"upstream answered HTTP {status}"
    return error_for_status(503 if status == 529 else status, text)


class UpstreamStreamDecoder:
    def __init__(self) -> None:
        self._started = False
        self._ended = False
        self._usage = wire.UpstreamUsage()
        self._stop_reason: str | None = None
        self._stop_sequence: str | None = None
        self._tool_blocks: set[int] = set()

    def feed(self, line: bytes) -> list[Event]:
        if self._ended:
            return []
        payload = sse_data(line)
        if payload is None:
            return []
        try:
            event = read_json(_decoder.decode, payload)
        except Unreadable as exc:
            return self._fail(ErrorEvent(f"upstream sent a stream event {exc}", status=BAD_GATEWAY))
        return self._event(event)

    def finish(self) -> list[Event]:
        if self._ended:
            return []
        self._ended = True
        return [ErrorEvent("upstream stream ended before message_stop", status=BAD_GATEWAY)]

    def _event(self, event: wire.UpstreamEvent) -> list[Event]:
        kind = event.type
        head: list[Event] = [] if self._started else [RoleStart()]
        self._started = True
        if kind == "message_start":
            usage = event.message.usage if event.message is not None else None
            if usage is not None:
                self._usage = _merged(self._usage, usage)
            if not head or usage is None:
                return head
            whole = _finish(None, None, self._usage).usage  # the prompt counted as at the end
            return [RoleStart(prompt_tokens=whole.prompt_tokens, cached_tokens=whole.cached_tokens, cache_write_tokens=whole.cache_write_tokens)]
        if kind == "content_block_start":
            return head + self._block_start(event.index or 0, event.content_block or wire.UpstreamBlock())
        if kind == "content_block_delta":
            return head + self._delta(event.index or 0, event.delta or wire.UpstreamDelta())
        if kind == "message_delta":
            delta = event.delta or wire.UpstreamDelta()
            self._stop_reason, self._stop_sequence = delta.stop_reason, delta.stop_sequence
            if event.usage is not None:
                self._usage = _merged(self._usage, event.usage)
            return head
        if kind == "message_stop":
            self._ended = True
            return head + [_finish(self._stop_reason, self._stop_sequence, self._usage)]
        if kind == "error":
            return head + self._fail(_error_event(event.error))
        return head  # ping, content_block_stop, and events of later API versions

    def _block_start(self, index: int, block: wire.UpstreamBlock) -> list[Event]:
        if block.type == "tool_use":
            self._tool_blocks.add(index)
            return [ToolCallFragment(index=index, id=block.id, name=block.name or "")]
        if block.type == "text" and block.text:
            return [ContentDelta(block.text)]
        if block.type == "thinking" and block.thinking:
            return [ThinkingDelta(block.thinking)]
        return []  # redacted_thinking and server-tool blocks have nothing to show

    def _delta(self, index: int, delta: wire.UpstreamDelta) -> list[Event]:
        if delta.type == "text_delta" and delta.text:
            return [ContentDelta(delta.text)]
        if delta.type == "thinking_delta" and delta.thinking:
            return [ThinkingDelta(delta.thinking)]
        if delta.type == "signature_delta" and delta.signature:
            return [ThinkingDelta("", signature=delta.signature)]
        if delta.type == "input_json_delta" and delta.partial_json and index in self._tool_blocks:
            return [ToolCallFragment(index=index, arguments=delta.partial_json)]
        return []

    def _fail(self, event: ErrorEvent) -> list[Event]:
        self._ended = True
        return [event]


def _merged(old: wire.UpstreamUsage, new: wire.UpstreamUsage) -> wire.UpstreamUsage:
    """``message_delta`` counts are cumulative and may leave out what ``message_start``
    said (a 0 input count there is a real count: input_tokens is after the cache read)."""
    fields = wire.UpstreamUsage.__struct_fields__
    return wire.UpstreamUsage(**{f: getattr(new, f) if getattr(new, f) is not None else getattr(old, f) for f in fields})


def _finish(reason: str | None, sequence: str | None, usage: wire.UpstreamUsage) -> Finish:
    """The canonical prompt count is the whole prompt (OpenAI's meaning): Anthropic's
    ``input_tokens`` leave out the tokens read from and written to its cache, which
    the canonical usage carries as parts of it."""
    read, written = usage.cache_read_input_tokens, usage.cache_creation_input_tokens
    prompt = (usage.input_tokens or 0) + (read or 0) + (written or 0)
    return Finish(
        reason=_STOP_REASONS.get(reason or "end_turn", "stop"),
        usage=Usage(prompt, usage.output_tokens or 0, cached_tokens=read, cache_write_tokens=written),
        stop_sequence=sequence if reason == "stop_sequence" else None,
    )


def _error_event(error: wire.UpstreamErrorDetail | None) -> ErrorEvent:
    error = error or wire.UpstreamErrorDetail()
    status = _ERROR_STATUS.get(error.type or "", BAD_GATEWAY)
    return ErrorEvent(f"upstream error: {error.message or error.type or 'unknown error'}", status=status)


__all__ = ["UpstreamStreamDecoder", "parse_upstream_error", "parse_upstream_response"]
