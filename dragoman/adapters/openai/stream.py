"""Canonical results and events as OpenAI answers: one JSON body, or SSE chunks.

Each SSE event is exactly ``data: <json>\\n\\n``; the stream opens with a role chunk,
closes with an empty-delta chunk carrying ``finish_reason`` (plus a usage chunk when
asked) and ends with ``data: [DONE]``. All chunks of a response share one id and
``created``.
"""

from __future__ import annotations

import math
import time
from functools import partial

import msgspec

from dragoman.adapters import canonical
from dragoman.adapters.aggregate import ChatResult
from dragoman.adapters.canonical import (
    ContentDelta,
    ErrorEvent,
    Event,
    Finish,
    FinishReason,
    Logprobs,
    PromptProgress,
    RoleStart,
    ThinkingDelta,
    ToolCall,
    ToolCallDone,
    ToolCallFragment,
    Usage,
)
from dragoman.adapters.errors import DragomanError, error_for_status, openai_error_type
from dragoman.adapters.openai import wire
from dragoman.adapters.reply import ModelReply
from dragoman.adapters.openai.ids import SYSTEM_FINGERPRINT, new_call_id, new_completion_id

SSE_MEDIA_TYPE = "text/event-stream"
DONE_FRAME = b"data: [DONE]\n\n"
# An SSE comment: every client ignores it, proxies see bytes moving (llama-server and
# OpenRouter send the same kind during a long prefill).
KEEPALIVE_FRAME = b": keep-alive\n\n"
# What OpenAI sends for a token the model rules out: JSON has no -Infinity, and the
# null msgspec would write breaks clients that type logprob as a number.
IMPOSSIBLE_LOGPROB = -9999.0

_encoder = msgspec.json.Encoder()
_EMPTY_DELTA = wire.ChatCompletionDelta()


def reply_for(request: wire.ChatCompletionRequest) -> ModelReply[StreamEncoder]:
    """The reply the request asked for: SSE when ``stream``, with a usage chunk when
    ``stream_options.include_usage``; one body otherwise."""
    encoder = partial(StreamEncoder, include_usage=wants_usage(request))
    return ModelReply(request.model, bool(request.stream), encoder, render_response)


def wants_usage(request: wire.ChatCompletionRequest) -> bool:
    """Whether a stream ends with a usage chunk (``stream_options.include_usage``)."""
    return bool(request.stream_options and request.stream_options.include_usage)


def render_response(result: ChatResult, model: str) -> bytes:
    """The ``chat.completion`` body of a non-streaming reply."""
    return render_choices([result], model, usage=result.usage)


def render_choices(results: list[ChatResult], model: str, *, usage: Usage) -> bytes:
    """The ``chat.completion`` body of one choice per result (``n``), indexed in order."""
    response = wire.ChatCompletionResponse(
        id=new_completion_id(),
        object="chat.completion",
        created=int(time.time()),
        model=model,
        system_fingerprint=SYSTEM_FINGERPRINT,
        choices=[_choice(result, index) for index, result in enumerate(results)],
        usage=usage_stats(usage),
    )
    return _encoder.encode(response)


def _choice(result: ChatResult, index: int) -> wire.ChatCompletionChoice:
    thinking = result.thinking or None
    message = wire.ChatCompletionResponseMessage(
        role="assistant",
        # OpenAI answers null, not "", when the reply is only tool calls.
        content=None if result.tool_calls and not result.content else result.content,
        reasoning_content=thinking,
        reasoning=thinking,
        tool_calls=[_tool_call(call) for call in result.tool_calls] or None,
    )
    return wire.ChatCompletionChoice(
        index=index,
        message=message,
        finish_reason=finish_reason(result.finish_reason, has_tool_calls=bool(result.tool_calls)),
        logprobs=None if result.logprobs is None else _logprobs(result.logprobs),
    )


def render_error(err: DragomanError) -> bytes:
    """``{"error": {"message", "type", "param", "code"}}``."""
    return _encoder.encode(_error_body(err))


def finish_reason(reason: FinishReason, *, has_tool_calls: bool) -> str:
    """OpenAI's ``finish_reason``: ``stop``, ``length`` or ``tool_calls`` (load/unload are
    Ollama's and mean a normal stop here)."""
    if reason == "length":
        return "length"
    if reason == "tool_calls" or has_tool_calls:
        return "tool_calls"
    return "stop"


class StreamEncoder:
    """Canonical events of one reply as SSE frames; one instance per response."""

    media_type = SSE_MEDIA_TYPE

    def __init__(
        self, model: str, *, include_usage: bool = False, index: int = 0, id: str | None = None, created: int | None = None
    ) -> None:
        self.model = model
        self.include_usage = include_usage
        # Which choice this is (``n``): its chunks share the response's id and created.
        self.index = index
        self.id = id or new_completion_id()
        self.created = int(time.time()) if created is None else created
        self._started = False
        self._calls_sent = 0
        # upstream fragment index -> our index, and whether that call's name went out
        self._fragment_calls: dict[int, tuple[int, bool]] = {}

    def encode(self, event: Event) -> bytes:
        head = b"" if self._started else self._start()
        if isinstance(event, ContentDelta):
            if not event.text and not event.logprobs:
                return head
            logprobs = _logprobs(event.logprobs) if event.logprobs else None
            return head + self._delta(wire.ChatCompletionDelta(content=event.text), logprobs=logprobs)
        if isinstance(event, ThinkingDelta):
            if not event.text:
                return head
            return head + self._delta(wire.ChatCompletionDelta(reasoning_content=event.text, reasoning=event.text))
        if isinstance(event, ToolCallDone):
            return head + self._delta(wire.ChatCompletionDelta(tool_calls=[self._whole_call(event.call)]))
        if isinstance(event, ToolCallFragment):
            return head + self._delta(wire.ChatCompletionDelta(tool_calls=[self._fragment(event)]))
        if isinstance(event, Logprobs):
            return head + self._delta(_EMPTY_DELTA, logprobs=_logprobs(event.tokens))
        if isinstance(event, Finish):
            return head + self._finish(event)
        if isinstance(event, ErrorEvent):
            return head + self.error(error_for_status(event.status, event.message, retry_after=event.retry_after))
        if isinstance(event, RoleStart):
            return head
        if isinstance(event, PromptProgress):
            stats = wire.PromptProgressStats(event.total, event.cached, event.processed, event.elapsed_ms)
            return head + self._chunk([], prompt_progress=stats)
        raise TypeError(f"unknown event {event!r}")  # pragma: no cover - exhaustiveness

    def error(self, err: DragomanError) -> bytes:
        """The frame for a failure after streaming began (Ollama drops these silently)."""
        return _frame(_error_body(err))

    def close(self) -> bytes:
        return DONE_FRAME

    def keepalive(self) -> bytes:
        return KEEPALIVE_FRAME

    def _start(self) -> bytes:
        self._started = True
        return self._delta(wire.ChatCompletionDelta(role="assistant", content=""))

    def _finish(self, event: Finish) -> bytes:
        reason = finish_reason(event.reason, has_tool_calls=self._calls_sent > 0)
        frame = self._chunk([wire.ChatCompletionStreamChoice(index=self.index, delta=_EMPTY_DELTA, finish_reason=reason)])
        if self.include_usage:
            frame += self._chunk([], usage=usage_stats(event.usage))
        return frame

    def _whole_call(self, call: ToolCall) -> wire.ToolCallDelta:
        index = self._next_index()
        arguments = _encoder.encode(call.arguments).decode()
        function = wire.FunctionDelta(name=call.name, arguments=arguments)
        return wire.ToolCallDelta(index=index, id=call.id or new_call_id(), type="function", function=function)

    def _fragment(self, fragment: ToolCallFragment) -> wire.ToolCallDelta:
        known = self._fragment_calls.get(fragment.index)
        if known is None:
            index = self._next_index()
            self._fragment_calls[fragment.index] = (index, bool(fragment.name))
            function = wire.FunctionDelta(name=fragment.name or "", arguments=fragment.arguments)
            return wire.ToolCallDelta(index=index, id=fragment.id or new_call_id(), type="function", function=function)
        index, named = known
        # A name that arrives after the opening fragment still has to reach the client.
        name = fragment.name if fragment.name and not named else None
        if name:
            self._fragment_calls[fragment.index] = (index, True)
        return wire.ToolCallDelta(index=index, function=wire.FunctionDelta(name=name, arguments=fragment.arguments))

    def _next_index(self) -> int:
        # Our own count, so parallel calls get 0, 1, … whatever the backend numbered them.
        index = self._calls_sent
        self._calls_sent += 1
        return index

    def _delta(self, delta: wire.ChatCompletionDelta, logprobs: wire.ChoiceLogprobs | None = None) -> bytes:
        choice = wire.ChatCompletionStreamChoice(index=self.index, delta=delta, finish_reason=None, logprobs=logprobs)
        return self._chunk([choice])

    def usage_frame(self, usage: Usage) -> bytes:
        """The chunk with no choices that carries the usage (``include_usage``)."""
        return self._chunk([], usage=usage_stats(usage))

    def _chunk(
        self,
        choices: list[wire.ChatCompletionStreamChoice],
        usage: wire.UsageStats | None = None,
        prompt_progress: wire.PromptProgressStats | None = None,
    ) -> bytes:
        chunk = wire.ChatCompletionStreamResponse(
            id=self.id,
            object="chat.completion.chunk",
            created=self.created,
            model=self.model,
            system_fingerprint=SYSTEM_FINGERPRINT,
            choices=choices,
            usage=usage,
            prompt_progress=prompt_progress,
        )
        return _frame(chunk)


def _frame(payload: msgspec.Struct) -> bytes:
    return b"data: " + _encoder.encode(payload) + b"\n\n"


def _error_body(err: DragomanError) -> wire.OpenAIErrorResponse:
    detail = wire.OpenAIErrorDetail(
        message=err.message, type=openai_error_type(err.status), param=err.param, code=err.code
    )
    return wire.OpenAIErrorResponse(error=detail)


def _tool_call(call: ToolCall) -> wire.ResponseToolCall:
    arguments = _encoder.encode(call.arguments).decode()
    function = wire.ResponseFunction(name=call.name, arguments=arguments)
    return wire.ResponseToolCall(id=call.id or new_call_id(), type="function", function=function)


def usage_stats(usage: Usage) -> wire.UsageStats:
    return wire.UsageStats(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
        prompt_tokens_details=None if usage.cached_tokens is None else wire.PromptTokensDetails(usage.cached_tokens),
    )


def _logprobs(tokens: list[canonical.TokenLogprob]) -> wire.ChoiceLogprobs:
    return wire.ChoiceLogprobs(content=[_logprob(token) for token in tokens])


def _logprob(token: canonical.TokenLogprob) -> wire.Logprob:
    return wire.Logprob(
        token=token.token,
        logprob=finite_logprob(token.logprob),
        bytes=_token_bytes(token.token, token.bytes),
        top_logprobs=[
            wire.TopLogprob(token=top.token, logprob=finite_logprob(top.logprob), bytes=_token_bytes(top.token, top.bytes))
            for top in token.top_logprobs
        ],
    )


def finite_logprob(logprob: float) -> float:
    """``logprob``, or :data:`IMPOSSIBLE_LOGPROB` for -inf (and NaN) from a masked token."""
    return logprob if math.isfinite(logprob) else IMPOSSIBLE_LOGPROB


def _token_bytes(token: str, known: list[int] | None) -> list[int]:
    # OpenAI always sends the UTF-8 bytes; backends that do not know them get the text's.
    return known if known is not None else list(token.encode("utf-8"))
