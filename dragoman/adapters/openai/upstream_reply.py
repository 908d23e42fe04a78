"""What an OpenAI-speaking upstream answers, as canonical events.

Servers differ in what they leave out and how they spell thinking (``reasoning`` or
``reasoning_content``), so everything is read leniently; anything that cannot be read
becomes an ``ErrorEvent``, never an exception out of the decoder.
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
    ToolCallFragment,
    TopLogprob,
    Usage,
)
from dragoman.adapters.errors import DragomanError, error_for_status
from dragoman.adapters.json_depth import MAX_DEPTH, too_deep
from dragoman.adapters.upstream_json import Unreadable, read_json, sse_data
from dragoman.adapters.openai import wire

BAD_GATEWAY = 502
_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    # The canonical stream has no "filtered"; the reply simply ended.
    "content_filter": "stop",
}
_reply_decoder = msgspec.json.Decoder(wire.UpstreamReply)


def parse_upstream_response(body: bytes) -> list[Event]:
    """A whole non-streaming upstream reply as the events a stream would have carried."""
    try:
        reply = read_json(_reply_decoder.decode, body)
    except Unreadable as exc:
        return [ErrorEvent(f"upstream sent a reply {exc}", status=BAD_GATEWAY)]
    if reply.error is not None:
        return [_error_event(reply.error)]
    if not reply.choices:
        return [ErrorEvent("upstream reply has no choices", status=BAD_GATEWAY)]
    choice = reply.choices[0]
    message = choice.message or choice.delta or wire.UpstreamMessage()
    events: list[Event] = [RoleStart()]
    thinking = message.reasoning_content or message.reasoning
    if thinking:
        events.append(ThinkingDelta(thinking))
    logprobs = _logprobs(choice.logprobs)
    text = choice.text if choice.text is not None else message.content
    if text:
        events.append(ContentDelta(text, logprobs))
        logprobs = None
    try:
        events += [ToolCallDone(_whole_call(call, position)) for position, call in enumerate(message.tool_calls or ())]
    except MalformedToolCall as exc:
        return [ErrorEvent(exc.message, status=BAD_GATEWAY)]
    if logprobs:
        events.append(Logprobs(logprobs))
    events.append(Finish(reason=_finish_reason(choice.finish_reason), usage=_usage(reply.usage)))
    return events


def parse_upstream_error(status: int, body: bytes) -> DragomanError:
    """An upstream's error response as our error with its status, keeping its message."""
    detail: wire.UpstreamErrorDetail | str | None = None
    try:
        detail = read_json(_reply_decoder.decode, body).error
    except Unreadable:
        pass
    if isinstance(detail, wire.UpstreamErrorDetail) and detail.message:
        err = error_for_status(status, detail.message)
        err.param = detail.param or err.param
        err.code = str(detail.code) if detail.code is not None else err.code
        return err
    if isinstance(detail, str) and detail:
        return error_for_status(status, detail)
    text = body.decode("utf-8", "replace").strip()
    return error_for_status(status, text or f"upstream answered HTTP {status}")


class UpstreamStreamDecoder:
    """Reads an upstream's SSE stream one line at a time.

    ``Finish`` waits for ``[DONE]`` (or EOF after a ``finish_reason``) because servers
    send ``usage`` in a chunk of its own after the one with ``finish_reason``.
    """

    def __init__(self) -> None:
        self._started = False
        self._ended = False  # [DONE] seen or an error reported: ignore the rest
        self._finish_reason: str | None = None
        self._usage: wire.UpstreamUsage | None = None
        self._call_ids: dict[str, int] = {}
        self._last_call_index = -1

    def feed(self, line: bytes) -> list[Event]:
        if self._ended:
            return []
        payload = sse_data(line)
        if payload is None:
            return []
        if payload == b"[DONE]":
            self._ended = True
            return self._finish()
        try:
            chunk = read_json(_reply_decoder.decode, payload)
        except Unreadable as exc:
            return self._fail(ErrorEvent(f"upstream sent a stream chunk {exc}", status=BAD_GATEWAY))
        if chunk.error is not None:
            return self._fail(_error_event(chunk.error))
        return self._chunk_events(chunk)

    def finish(self) -> list[Event]:
        """Events at EOF: the ``Finish`` if the reply completed without ``[DONE]``."""
        if self._ended:
            return []
        self._ended = True
        if self._finish_reason is None:
            return [ErrorEvent("upstream stream ended before the reply was complete", status=BAD_GATEWAY)]
        return self._finish()

    def _chunk_events(self, chunk: wire.UpstreamReply) -> list[Event]:
        events: list[Event] = []
        if not self._started:
            self._started = True
            events.append(RoleStart())
        if chunk.usage is not None:
            self._usage = chunk.usage
        for choice in chunk.choices or ():
            if choice.index == 0:  # we ask for one choice; ignore any others
                events += self._choice_events(choice)
        return events

    def _choice_events(self, choice: wire.UpstreamChoice) -> list[Event]:
        events: list[Event] = []
        delta = choice.delta or choice.message
        logprobs = _logprobs(choice.logprobs)
        if choice.text:  # a /v1/completions chunk
            events.append(ContentDelta(choice.text, logprobs))
            logprobs = None
        if delta is not None:
            thinking = delta.reasoning_content or delta.reasoning
            if thinking:
                events.append(ThinkingDelta(thinking))
            if delta.content:
                events.append(ContentDelta(delta.content, logprobs))
                logprobs = None  # they went out with the text
            events += [self._fragment(call) for call in delta.tool_calls or ()]
        if logprobs:
            events.append(Logprobs(logprobs))
        if choice.finish_reason is not None:
            self._finish_reason = choice.finish_reason
        return events

    def _fragment(self, call: wire.UpstreamToolCall) -> ToolCallFragment:
        function = call.function or wire.UpstreamFunction()
        arguments = function.arguments
        if isinstance(arguments, dict):  # some servers send whole calls with object arguments
            arguments = msgspec.json.encode(arguments).decode()
        return ToolCallFragment(index=self._call_index(call), arguments=arguments or "", id=call.id, name=function.name)

    def _call_index(self, call: wire.UpstreamToolCall) -> int:
        """The call's ``index``; for servers that omit it, a new id opens a new call and a
        fragment without one continues the last."""
        if call.index is not None:
            index = call.index
        elif call.id is not None:
            index = self._call_ids.get(call.id, self._last_call_index + 1)
        else:
            index = max(self._last_call_index, 0)
        if call.id is not None:
            self._call_ids.setdefault(call.id, index)
        self._last_call_index = max(self._last_call_index, index)
        return index

    def _finish(self) -> list[Event]:
        head: list[Event] = [] if self._started else [RoleStart()]
        self._started = True
        return [*head, Finish(reason=_finish_reason(self._finish_reason), usage=_usage(self._usage))]

    def _fail(self, event: ErrorEvent) -> list[Event]:
        self._ended = True
        return [event]


def _whole_call(call: wire.UpstreamToolCall, position: int) -> ToolCall:
    function = call.function or wire.UpstreamFunction()
    arguments = function.arguments
    if not isinstance(arguments, dict):
        arguments = parse_arguments(arguments or "", function.name)
    elif too_deep(arguments):
        raise MalformedToolCall(f"tool call '{function.name or '?'}' has arguments nested more than {MAX_DEPTH} levels deep")
    index = call.index if call.index is not None else position
    return ToolCall(name=function.name or "", arguments=arguments, id=call.id, index=index)


def _finish_reason(reason: str | None) -> FinishReason:
    return _FINISH_REASONS.get(reason or "stop", "stop")


def _usage(usage: wire.UpstreamUsage | None) -> Usage:
    if usage is None:
        return Usage()
    # Both parts are counted in prompt_tokens already, as the canonical usage counts them.
    details = usage.prompt_tokens_details or wire.UpstreamPromptTokensDetails()
    return Usage(usage.prompt_tokens or 0, usage.completion_tokens or 0, details.cached_tokens, details.cache_write_tokens)


def _logprobs(logprobs: wire.UpstreamLogprobs | None) -> list[TokenLogprob] | None:
    """Either shape as canonical logprobs; None when there are none."""
    if logprobs is None:
        return None
    if logprobs.content:
        return [
            TokenLogprob(
                token=token.token,
                logprob=token.logprob,
                bytes=token.bytes,
                top_logprobs=[TopLogprob(top.token, top.logprob, top.bytes) for top in token.top_logprobs or ()],
            )
            for token in logprobs.content
        ]
    if logprobs.tokens:
        values = logprobs.token_logprobs or []
        tops = logprobs.top_logprobs or []
        return [
            TokenLogprob(
                token=token,
                logprob=_value(values[i] if i < len(values) else None),
                top_logprobs=[TopLogprob(t, _value(v)) for t, v in ((tops[i] if i < len(tops) else None) or {}).items()],
            )
            for i, token in enumerate(logprobs.tokens)
        ]
    return None


def _value(logprob: float | None) -> float:
    # A prompt token's logprob is null in vLLM's echo; -inf says "not known" here.
    return float("-inf") if logprob is None else logprob


def _error_event(error: wire.UpstreamErrorDetail | str) -> ErrorEvent:
    if isinstance(error, str):
        return ErrorEvent(f"upstream error: {error}", status=BAD_GATEWAY)
    # Some servers put the HTTP status they would have answered in ``code``.
    status = error.code if isinstance(error.code, int) and 400 <= error.code <= 599 else BAD_GATEWAY
    return ErrorEvent(f"upstream error: {error.message or error.type or 'unknown error'}", status=status)
