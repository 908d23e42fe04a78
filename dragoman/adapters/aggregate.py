"""Folding a stream of events into one reply, and tool-call fragments into whole calls.

Non-streaming replies are built here from the very events a stream would carry.
"""

from __future__ import annotations

from collections.abc import AsyncIterable
from typing import Any

import msgspec

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
    Timings,
    TokenLogprob,
    ToolCall,
    ToolCallDone,
    ToolCallFragment,
    Usage,
)
from dragoman.adapters.errors import BackendError, DragomanError, error_for_status
from dragoman.adapters.json_depth import MAX_DEPTH, TOO_DEEP, too_deep


class MalformedToolCall(BackendError):
    """Fragments whose concatenated arguments are not a JSON object."""


class ToolCallAccumulator:
    """Collects ``ToolCallFragment`` pieces per ``index`` into whole :class:`ToolCall` s.

    A call is complete when a fragment for a later index starts or the stream
    finishes; :meth:`add` returns the calls completed by that fragment.
    """

    def __init__(self) -> None:
        self._open: dict[int, list[Any]] = {}  # index -> [id, name, [argument pieces]]

    def add(self, fragment: ToolCallFragment) -> list[ToolCall]:
        done = [self._close(i) for i in sorted(self._open) if i < fragment.index]
        entry = self._open.setdefault(fragment.index, [None, None, []])
        if fragment.id:
            entry[0] = fragment.id
        if fragment.name and not entry[1]:
            entry[1] = fragment.name
        if fragment.arguments:
            entry[2].append(fragment.arguments)
        return done

    def finish(self) -> list[ToolCall]:
        return [self._close(i) for i in sorted(self._open)]

    @property
    def pending(self) -> bool:
        return bool(self._open)

    def _close(self, index: int) -> ToolCall:
        call_id, name, pieces = self._open.pop(index)
        return ToolCall(name=name or "", arguments=parse_arguments("".join(pieces), name), id=call_id, index=index)


def parse_arguments(text: str, name: str | None = None, *, max_depth: int | None = MAX_DEPTH) -> dict[str, Any]:
    """Tool-call arguments from a JSON string; ``""`` is ``{}`` (Ollama 400s on it).
    ``max_depth`` bounds what an upstream may send; a client's request is bounded
    by the configured limit instead (``None`` here)."""
    if not text.strip():
        return {}
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise MalformedToolCall(f"tool call '{name or '?'}' has arguments that are not valid JSON: {exc}") from exc
    except RecursionError:
        raise MalformedToolCall(f"tool call '{name or '?'}' has arguments {TOO_DEEP}") from None
    if not isinstance(value, dict):
        raise MalformedToolCall(f"tool call '{name or '?'}' has arguments that are not a JSON object")
    if max_depth is not None and too_deep(value, max_depth):
        raise MalformedToolCall(f"tool call '{name or '?'}' has arguments nested more than {max_depth} levels deep")
    return value


class ChatResult(msgspec.Struct):
    """A whole reply: what a non-streaming response is rendered from."""

    content: str = ""
    thinking: str = ""
    tool_calls: list[ToolCall] = msgspec.field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None
    finish_reason: FinishReason = "stop"
    usage: Usage = Usage()
    timings: Timings = Timings()
    thinking_signature: str | None = None
    stop_sequence: str | None = None
    context: list[int] | None = None  # Finish.context


class ResultBuilder:
    """Feeds events one at a time; ``result()`` gives the reply so far."""

    def __init__(self) -> None:
        self._content: list[str] = []
        self._thinking: list[str] = []
        self._calls: list[ToolCall] = []
        self._logprobs: list[TokenLogprob] | None = None
        self._fragments = ToolCallAccumulator()
        self._finish = Finish()
        self._signature: str | None = None

    def add(self, event: Event) -> None:
        if isinstance(event, ContentDelta):
            self._content.append(event.text)
            if event.logprobs is not None:
                self._logprobs = (self._logprobs or []) + list(event.logprobs)
        elif isinstance(event, ThinkingDelta):
            self._thinking.append(event.text)
            if event.signature:
                self._signature = event.signature
        elif isinstance(event, ToolCallDone):
            self._calls.append(event.call)
        elif isinstance(event, ToolCallFragment):
            self._calls.extend(self._fragments.add(event))
        elif isinstance(event, Logprobs):
            self._logprobs = self._logprobs or []
            self._logprobs.extend(event.tokens)  # in place: a token at a time must stay linear
        elif isinstance(event, Finish):
            self._calls.extend(self._fragments.finish())
            self._finish = event
        elif isinstance(event, ErrorEvent):
            raise error_for_status(event.status, event.message, retry_after=event.retry_after)
        elif not isinstance(event, (RoleStart, PromptProgress)):  # pragma: no cover - exhaustiveness
            raise TypeError(f"unknown event {event!r}")

    def result(self) -> ChatResult:
        reason = self._finish.reason
        if self._calls and reason == "stop":
            reason = "tool_calls"
        return ChatResult(
            content="".join(self._content),
            thinking="".join(self._thinking),
            tool_calls=self._calls,
            logprobs=self._logprobs,
            finish_reason=reason,
            usage=self._finish.usage,
            timings=self._finish.timings,
            thinking_signature=self._signature,
            stop_sequence=self._finish.stop_sequence,
            context=self._finish.context,
        )


async def aggregate(events: AsyncIterable[Event]) -> ChatResult:
    """The whole reply of a stream; an error event raises the error it describes."""
    builder = ResultBuilder()
    async for event in events:
        builder.add(event)
    return builder.result()


__all__ = [
    "ChatResult",
    "DragomanError",
    "MalformedToolCall",
    "ResultBuilder",
    "ToolCallAccumulator",
    "aggregate",
    "parse_arguments",
]
