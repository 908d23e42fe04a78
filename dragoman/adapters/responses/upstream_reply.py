"""What an upstream's ``/v1/responses`` answers, as canonical events.

Stream events are read by ``type``: text and reasoning deltas as they come, a
``function_call`` item as fragments of one call keyed by its ``output_index`` (the
item's arrival carries call id and name, argument deltas follow), and the terminal
event (``response.completed`` / ``.incomplete`` / ``.failed``, or ``error``) as the end.
"""

from __future__ import annotations

import msgspec

from dragoman.adapters.aggregate import MalformedToolCall, parse_arguments
from dragoman.adapters.canonical import (
    ContentDelta,
    ErrorEvent,
    Event,
    Finish,
    RoleStart,
    ThinkingDelta,
    ToolCall,
    ToolCallDone,
    ToolCallFragment,
    Usage,
)
from dragoman.adapters.responses import wire
from dragoman.adapters.upstream_json import Unreadable, read_json, sse_data

BAD_GATEWAY = 502
_REASONING_DELTAS = ("response.reasoning_text.delta", "response.reasoning_summary_text.delta")
# Codes a failed response carries, as the status a client would have got.
_CODE_STATUS = {"context_length_exceeded": 400, "invalid_prompt": 400, "rate_limit_exceeded": 429,
                "server_is_overloaded": 503, "slow_down": 503}  # fmt: skip
_decoder = msgspec.json.Decoder(wire.UpstreamEvent)
_response_decoder = msgspec.json.Decoder(wire.UpstreamResponse)


def parse_upstream_response(body: bytes) -> list[Event]:
    """A whole ``response`` object as the events a stream would have carried."""
    try:
        response = read_json(_response_decoder.decode, body)
    except Unreadable as exc:
        return [ErrorEvent(f"upstream sent a reply {exc}", status=BAD_GATEWAY)]
    if response.status == "failed":
        return [_failed(response)]
    events: list[Event] = [RoleStart()]
    try:
        for position, item in enumerate(response.output or ()):
            events += _item_events(item, position)
    except MalformedToolCall as exc:
        return [ErrorEvent(exc.message, status=BAD_GATEWAY)]
    return [*events, _finish(response)]


class UpstreamStreamDecoder:
    def __init__(self) -> None:
        self._started = False
        self._ended = False

    def feed(self, line: bytes) -> list[Event]:
        if self._ended:
            return []
        payload = sse_data(line)
        if payload is None or payload == b"[DONE]":
            return []
        try:
            event = read_json(_decoder.decode, payload)
        except Unreadable as exc:
            return self._end([ErrorEvent(f"upstream sent a stream event {exc}", status=BAD_GATEWAY)])
        head: list[Event] = [] if self._started else [RoleStart()]
        self._started = True
        return head + self._event(event)

    def finish(self) -> list[Event]:
        if self._ended:
            return []
        self._ended = True
        return [ErrorEvent("upstream stream ended before the response was complete", status=BAD_GATEWAY)]

    def _event(self, event: wire.UpstreamEvent) -> list[Event]:
        kind = event.type
        if kind == "response.output_text.delta" and event.delta:
            return [ContentDelta(event.delta)]
        if kind in _REASONING_DELTAS and event.delta:
            return [ThinkingDelta(event.delta)]
        if kind == "response.output_item.added" and event.item is not None and event.item.type == "function_call":
            item = event.item
            return [ToolCallFragment(index=event.output_index or 0, arguments=item.arguments or "", id=item.call_id, name=item.name)]
        if kind == "response.function_call_arguments.delta" and event.delta:
            return [ToolCallFragment(index=event.output_index or 0, arguments=event.delta)]
        if kind in ("response.completed", "response.incomplete"):
            return self._end([_finish(event.response or wire.UpstreamResponse())])
        if kind == "response.failed":
            return self._end([_failed(event.response or wire.UpstreamResponse())])
        if kind == "error":
            code = event.code or (event.error.code if isinstance(event.error, wire.UpstreamError) else None)
            message = event.message or (event.error.message if isinstance(event.error, wire.UpstreamError) else event.error)
            return self._end([ErrorEvent(f"upstream error: {message or code or 'unknown error'}", status=_CODE_STATUS.get(code or "", BAD_GATEWAY))])
        return []

    def _end(self, events: list[Event]) -> list[Event]:
        self._ended = True
        return events


def _item_events(item: wire.UpstreamItem, position: int) -> list[Event]:
    if item.type == "message":
        text = "".join(p.text or p.refusal or "" for p in item.content or ())
        return [ContentDelta(text)] if text else []
    if item.type == "reasoning":
        thinking = "".join(p.text or "" for p in item.content or ()) or "".join(p.text or "" for p in item.summary or ())
        return [ThinkingDelta(thinking)] if thinking else []
    if item.type == "function_call":
        arguments = parse_arguments(item.arguments or "", item.name)
        return [ToolCallDone(ToolCall(name=item.name or "", arguments=arguments, id=item.call_id, index=position))]
    return []  # built-in tool calls made on the upstream's side


def _finish(response: wire.UpstreamResponse) -> Finish:
    usage = response.usage or wire.UpstreamUsage()
    cached = usage.input_tokens_details.cached_tokens if usage.input_tokens_details is not None else None
    incomplete = response.status == "incomplete" or response.incomplete_details is not None
    calls = any(item.type == "function_call" for item in response.output or ())
    return Finish(
        reason="length" if incomplete else "tool_calls" if calls else "stop",
        usage=Usage(prompt_tokens=usage.input_tokens or 0, completion_tokens=usage.output_tokens or 0, cached_tokens=cached),
    )


def _failed(response: wire.UpstreamResponse) -> ErrorEvent:
    error = response.error or wire.UpstreamError()
    status = _CODE_STATUS.get(error.code or "", BAD_GATEWAY)
    return ErrorEvent(f"upstream error: {error.message or error.code or 'the response failed'}", status=status)


__all__ = ["UpstreamStreamDecoder", "parse_upstream_response"]
