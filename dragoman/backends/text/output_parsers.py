"""Splitting generated text into content, thinking and tool calls, incrementally.

Markers may arrive split across deltas (``<tool`` then ``_call>``), so the parser
holds back any tail that could still become a marker. ``<think>…</think>`` becomes
:class:`ThinkingDelta`; Hermes/Qwen ``<tool_call>{json}</tool_call>`` becomes one
:class:`ToolCallDone` as soon as it closes. Whitespace around tool calls is dropped.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any, Literal

from dragoman.adapters.canonical import ContentDelta, Event, Logprobs, ThinkingDelta, TokenLogprob, ToolCall, ToolCallDone
from dragoman.backends.text.stops import partial_suffix_length

ToolParser = Literal["hermes", "none"]
ReasoningParser = Literal["think", "none"]

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


class OutputParser:
    """``feed`` each decoded delta, then ``finish`` once; both return events."""

    def __init__(
        self,
        *,
        tools: bool,
        thinking: bool,
        start_in_thinking: bool = False,
        call_id: Callable[[], str] = new_call_id,
    ) -> None:
        self._openers = [m for m, on in ((THINK_OPEN, thinking), (CALL_OPEN, tools)) if on]
        self._state: Literal["content", "thinking", "tool"] = "thinking" if start_in_thinking else "content"
        self._buffer = ""
        self._pending_space = ""  # trailing whitespace of content, emitted once text follows
        self._strip_next = False  # drop whitespace right after </think> or </tool_call>
        self._call_id = call_id
        self.calls = 0

    def feed(self, text: str) -> list[Event]:
        self._buffer += text
        events: list[Event] = []
        while True:
            if self._state == "content":
                progressed = self._scan_content(events)
            elif self._state == "thinking":
                progressed = self._scan_until(THINK_CLOSE, events)
            else:
                progressed = self._scan_until(CALL_CLOSE, events)
            if not progressed:
                return events

    def finish(self) -> list[Event]:
        events: list[Event] = []
        rest, self._buffer = self._buffer, ""
        if self._state == "thinking":
            if rest:
                events.append(ThinkingDelta(rest))
        elif self._state == "tool":
            call = self._parse_call(rest)
            if call is not None:
                events.append(ToolCallDone(call))
            else:
                self._content(CALL_OPEN + rest, events)
        else:
            self._content(rest, events)
        if self._pending_space and not self.calls:
            events.append(ContentDelta(self._pending_space))
        self._pending_space = ""
        return events

    # -- states ------------------------------------------------------------------------

    def _scan_content(self, events: list[Event]) -> bool:
        found = [(i, m) for m in self._openers if (i := self._buffer.find(m)) >= 0]
        if found:
            index, marker = min(found)
            self._content(self._buffer[:index], events)
            self._pending_space = ""  # whitespace before a marker is layout, not content
            self._buffer = self._buffer[index + len(marker) :]
            self._state = "thinking" if marker == THINK_OPEN else "tool"
            return True
        keep = partial_suffix_length(self._buffer, self._openers)
        self._content(self._buffer[: len(self._buffer) - keep], events)
        self._buffer = self._buffer[len(self._buffer) - keep :]
        return False

    def _scan_until(self, closer: str, events: list[Event]) -> bool:
        index = self._buffer.find(closer)
        if index < 0:
            if self._state == "thinking":
                keep = partial_suffix_length(self._buffer, [closer])
                if len(self._buffer) > keep:
                    events.append(ThinkingDelta(self._buffer[: len(self._buffer) - keep]))
                    self._buffer = self._buffer[len(self._buffer) - keep :]
            return False
        body, self._buffer = self._buffer[:index], self._buffer[index + len(closer) :]
        if self._state == "thinking":
            if body:
                events.append(ThinkingDelta(body))
        else:
            call = self._parse_call(body)
            if call is not None:
                events.append(ToolCallDone(call))
            else:
                self._content(CALL_OPEN + body + CALL_CLOSE, events)
        self._state = "content"
        self._strip_next = True
        return True

    def _content(self, text: str, events: list[Event]) -> None:
        if self._strip_next:
            text = text.lstrip()
            if not text:
                return
            self._strip_next = False
        if not text:
            return
        body = text.rstrip()
        space = text[len(body) :]
        if body:
            events.append(ContentDelta(self._pending_space + body))
            self._pending_space = space
        else:
            self._pending_space += space

    def _parse_call(self, body: str) -> ToolCall | None:
        parsed = parse_hermes_call(body)
        if parsed is None:
            return None
        name, arguments = parsed
        call = ToolCall(name=name, arguments=arguments, id=self._call_id(), index=self.calls)
        self.calls += 1
        return call


def parse_hermes_call(body: str) -> tuple[str, dict[str, Any]] | None:
    """``{"name": …, "arguments": {…}}`` (arguments may be a JSON string, or called
    ``parameters``) → (name, arguments); None when it is not a call."""
    try:
        value = json.loads(body.strip())
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None
    return value["name"], arguments


class LogprobsPairing:
    """Puts each token's logprobs on the reply text it produced, so that a stream
    carries them on the same chunk as their content. ``pair`` takes the parser's
    events for a batch of tokens and those tokens' logprobs: they ride on the first
    content delta; tokens that produced only thinking or a call get a ``Logprobs``
    event of their own; tokens whose text is still held back wait for the next text.
    """

    def __init__(self) -> None:
        self._pending: list[TokenLogprob] = []

    def pair(self, events: list[Event], logprobs: list[TokenLogprob] | None) -> list[Event]:
        if logprobs:
            self._pending += logprobs
        if not self._pending or not events:
            return events
        paired: list[Event] = []
        for event in events:
            if self._pending and isinstance(event, ContentDelta):
                event = ContentDelta(event.text, [*(event.logprobs or []), *self._pending])
                self._pending = []
            paired.append(event)
        return paired + self.flush()

    def flush(self) -> list[Event]:
        """What is still pending, as a ``Logprobs`` event (at the end of a reply)."""
        if not self._pending:
            return []
        event, self._pending = Logprobs(self._pending), []
        return [event]
