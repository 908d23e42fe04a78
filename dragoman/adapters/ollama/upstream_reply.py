"""An upstream Ollama server's NDJSON reply → canonical events, streamed or whole.

Tool calls arrive whole, with object arguments (or, from lenient servers, a JSON
string of them); either way the canonical call carries parsed arguments, bounded in depth.
"""

from __future__ import annotations

import msgspec

from dragoman.adapters.aggregate import MalformedToolCall, parse_arguments
from dragoman.adapters.canonical import (
    ContentDelta,
    ErrorEvent,
    Event,
    Finish,
    FinishReason,
    Logprobs,
    RoleStart,
    ThinkingDelta,
    TokenLogprob,
    ToolCall,
    ToolCallDone,
    TopLogprob,
)
from dragoman.adapters.errors import valid_error_status
from dragoman.adapters.json_depth import MAX_DEPTH, TOO_DEEP, too_deep
from dragoman.adapters.ollama import wire
from dragoman.adapters.upstream_json import Unreadable, read_json

_FINISH_REASON: dict[str, FinishReason] = {"stop": "stop", "length": "length", "load": "load", "unload": "unload"}
_line_decoder = msgspec.json.Decoder(wire.UpstreamChatResponse)


class UpstreamStreamDecoder:
    """Reads an Ollama server's reply one NDJSON line at a time."""

    def __init__(self) -> None:
        self._started = False
        self._ended = False
        self._calls_seen = 0

    def feed(self, line: bytes) -> list[Event]:
        line = line.strip()
        if not line or self._ended:
            return []
        try:
            reply = read_json(self.decode, line)
        except Unreadable as exc:
            return self._end(ErrorEvent(f"upstream sent a line {exc}", status=502))
        return self._reply_events(reply)

    def decode(self, body: bytes) -> wire.UpstreamChatResponse:
        """One line (or a whole reply); a subclass reads ``/api/generate``'s shape."""
        return _line_decoder.decode(body)

    def finish(self) -> list[Event]:
        if self._ended:
            return []
        return self._end(ErrorEvent("upstream stream ended before its final (done) line", status=502))

    def _reply_events(self, reply: wire.UpstreamChatResponse) -> list[Event]:
        if reply.error is not None:
            return self._end(_upstream_error(reply))
        events: list[Event] = []
        if not self._started:
            self._started = True
            events.append(RoleStart())
        logprobs = _canonical_logprobs(reply.logprobs) if reply.logprobs else None
        if reply.message is not None:
            try:
                events += self._message_events(reply.message, logprobs)
            except MalformedToolCall as exc:
                return self._end(ErrorEvent(exc.message, status=502), events)
            if reply.message.content:
                logprobs = None  # they went out with the text
        if logprobs:
            events.append(Logprobs(tokens=logprobs))
        if reply.done:
            self._ended = True
            events.append(_upstream_finish(reply))
        return events

    def _end(self, error: ErrorEvent, events: list[Event] | None = None) -> list[Event]:
        self._ended = True
        return [*(events or []), error]

    def _message_events(self, message: wire.ChatMessage, logprobs: list[TokenLogprob] | None) -> list[Event]:
        events: list[Event] = []
        if message.thinking:
            events.append(ThinkingDelta(message.thinking))
        if message.content:
            events.append(ContentDelta(message.content, logprobs))
        for call in message.tool_calls or []:
            events.append(ToolCallDone(_upstream_call(call, self._calls_seen)))
            self._calls_seen += 1
        return events


def _upstream_error(reply: wire.UpstreamChatResponse) -> ErrorEvent:
    """An error line's own ``status`` is a claim, not a fact: only 400–599 is kept
    (a 200 there would answer an error as a success)."""
    if reply.status is None:
        return ErrorEvent(reply.error or "upstream error", status=500)
    if valid_error_status(reply.status):
        return ErrorEvent(reply.error or "upstream error", status=reply.status)
    return ErrorEvent(f"{reply.error} (the upstream's error line gave status {reply.status})", status=502)


def _upstream_call(call: wire.ToolCall, index: int) -> ToolCall:
    arguments = call.function.arguments
    if isinstance(arguments, str):
        arguments = parse_arguments(arguments, call.function.name)
    elif too_deep(arguments):
        raise MalformedToolCall(f"tool call '{call.function.name}' has arguments nested more than {MAX_DEPTH} levels deep")
    return ToolCall(name=call.function.name, arguments=arguments or {}, id=call.id, index=index)


def _upstream_finish(reply: wire.UpstreamChatResponse) -> Finish:
    return Finish(
        reason=_FINISH_REASON.get(reply.done_reason or "stop", "stop"),
        usage=reply.usage(),
        timings=reply.timings(),
        context=reply.context,
    )


def _canonical_logprobs(logprobs: list[wire.Logprob]) -> list[TokenLogprob]:
    return [
        TokenLogprob(
            token=lp.token,
            logprob=lp.logprob,
            bytes=lp.bytes,
            top_logprobs=[TopLogprob(token=a.token, logprob=a.logprob, bytes=a.bytes) for a in lp.top_logprobs or []],
        )
        for lp in logprobs
    ]


def parse_upstream_response(body: bytes, decoder: UpstreamStreamDecoder | None = None) -> list[Event]:
    """A non-streaming reply as events; an NDJSON body (stream flag ignored) works too."""
    decoder = decoder or UpstreamStreamDecoder()
    events: list[Event] = []
    try:
        # One object, however it is laid out over lines.
        events += decoder._reply_events(decoder.decode(body))
    except RecursionError:
        return [ErrorEvent(f"upstream sent a reply {TOO_DEEP}", status=502)]
    except msgspec.DecodeError:
        for line in body.splitlines():
            events += decoder.feed(line)
    return events + decoder.finish()


__all__ = ["UpstreamStreamDecoder", "parse_upstream_response"]
