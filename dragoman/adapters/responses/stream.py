"""Canonical results and events as OpenAI Responses answers: one ``response`` object, or
the typed SSE stream.

A stream is ``response.created``, ``response.in_progress``, then each output item in
turn — ``response.output_item.added``, its parts and deltas, ``response.output_item.done``
— and one of ``response.completed``, ``response.incomplete`` (the token limit: clients
such as Codex treat it as a failure, as OpenAI means it) or ``response.failed``. Every
event carries a ``sequence_number``, from 0 up by one. Items: a ``reasoning`` item for
thinking (``reasoning_text`` content), a ``message`` for text, a ``function_call`` per call.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import msgspec

from dragoman.adapters.aggregate import ChatResult
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
from dragoman.adapters.fragments import CallOpened, FragmentOpener, Step
from dragoman.adapters.responses import wire
from dragoman.adapters.responses.meta import ResponseMeta, meta_for
from dragoman.adapters.responses.ids import (
    encode_reasoning,
    new_call_id,
    new_function_call_id,
    new_message_id,
    new_reasoning_id,
    new_response_id,
)

SSE_MEDIA_TYPE = "text/event-stream"

_encoder = msgspec.json.Encoder()
_Closing = wire.Completed | wire.Incomplete | wire.Failed  # the events that end a stream


def response_object(
    meta: ResponseMeta,
    response_id: str,
    created_at: int,
    status: Literal["completed", "failed", "in_progress", "incomplete", "queued", "cancelled"],
    output: list[wire.OutputItem] | None = None,
    usage: Usage | None = None,
    error: DragomanError | None = None,
) -> wire.Response:
    text = meta.text if meta.text is not None and meta.text.format is not None else wire.TextConfig(format=wire.TextFormat(type="text"))
    return wire.Response(
        id=response_id,
        created_at=created_at,
        status=status,
        completed_at=int(time.time()) if status == "completed" else None,
        error=wire.ResponseError(code=error_code(error), message=error.message) if error is not None else None,
        incomplete_details=wire.IncompleteDetails(reason="max_output_tokens") if status == "incomplete" else None,
        instructions=meta.instructions,
        max_output_tokens=meta.max_output_tokens,
        max_tool_calls=meta.max_tool_calls,
        model=meta.model,
        output=output or [],
        parallel_tool_calls=meta.parallel_tool_calls,
        previous_response_id=meta.previous_response_id,
        reasoning=meta.reasoning or wire.ReasoningConfig(),
        store=meta.store,
        temperature=meta.temperature,
        text=text,
        tool_choice=meta.tool_choice,
        tools=meta.tools,
        top_p=meta.top_p,
        presence_penalty=meta.presence_penalty,
        frequency_penalty=meta.frequency_penalty,
        top_logprobs=meta.top_logprobs,
        truncation=meta.truncation,
        usage=_usage(usage) if usage is not None else None,
        user=meta.user,
        metadata=meta.metadata,
        prompt_cache_key=meta.prompt_cache_key,
        safety_identifier=meta.safety_identifier,
        conversation=wire.ConversationRef(meta.conversation) if meta.conversation else None,
        background=meta.background,
    )


def status_of(reason: FinishReason) -> Literal["completed", "incomplete"]:
    return "incomplete" if reason == "length" else "completed"


def build_response(result: ChatResult, meta: ResponseMeta) -> wire.Response:
    """The ``response`` object of a non-streaming reply."""
    output: list[wire.OutputItem] = [meta.compaction] if meta.compaction is not None else []
    if result.thinking:
        output.append(_reasoning_item(new_reasoning_id(), result.thinking, meta, "completed"))
    if result.content or not (result.thinking or result.tool_calls):
        output.append(_message_item(new_message_id(), result.content, "completed"))
    output += [_call_item(new_function_call_id(), call.id, call.name, _json(call.arguments), "completed") for call in result.tool_calls]
    status = status_of(result.finish_reason)
    return response_object(meta, new_response_id(), int(time.time()), status, output, result.usage)


def encode_response(response: wire.Response) -> bytes:
    return _encoder.encode(response)


def error_code(err: DragomanError | None) -> str:
    """The ``error.code`` of a failed response (Codex reads some of these by name)."""
    if err is None:
        return "server_error"
    if isinstance(err, ContextTooLong):
        return "context_length_exceeded"
    if err.status == 429:
        return "rate_limit_exceeded"
    if err.status == 503:
        return "server_is_overloaded"
    if err.status < 500:
        return err.code or "invalid_request"
    return "server_error"


class StreamEncoder:
    """Canonical events of one reply as Responses SSE events; one instance per response.
    ``final`` holds the finished ``response`` object once the stream has ended."""

    media_type = SSE_MEDIA_TYPE

    def __init__(self, meta: ResponseMeta) -> None:
        self.meta = meta
        self.id = new_response_id()
        self.created_at = int(time.time())
        self.final: wire.Response | None = None
        self._seq = 0
        self._started = False
        self._done: list[wire.OutputItem] = []
        self._open: Literal["message", "reasoning", "call"] | None = None
        self._item_id = ""
        self._pieces: list[str] = []
        self._call: tuple[str, str] | None = None  # call_id, name of the open call item
        self._fragments = FragmentOpener()
        self._closing: tuple[type[_Closing], int, bytes] = (wire.Completed, 0, b"")

    def encode(self, event: Event) -> bytes:
        if self.final is not None:
            return b""
        out = [] if self._started else self._start()
        if not isinstance(event, ToolCallFragment):
            out += self._steps(self._fragments.flush())  # a call whose name never came still goes out
            self._fragments.close()
        if isinstance(event, ContentDelta):
            if event.text:
                out += self._text(event.text)
        elif isinstance(event, ThinkingDelta):
            if event.text:
                out += self._thinking(event.text)
        elif isinstance(event, ToolCallDone):
            out += self._whole_call(event.call)
        elif isinstance(event, ToolCallFragment):
            out += self._steps(self._fragments.feed(event))
        elif isinstance(event, Finish):
            out += self._finish(event)
        elif isinstance(event, ErrorEvent):
            return b"".join(out) + self.error(error_for_status(event.status, event.message, retry_after=event.retry_after))
        elif not isinstance(event, (RoleStart, Logprobs)):  # pragma: no cover - exhaustiveness
            raise TypeError(f"unknown event {event!r}")
        return b"".join(out)

    def error(self, err: DragomanError) -> bytes:
        """``response.failed``, with what was produced so far (the open item incomplete)."""
        output = [*self._done, *([self._current("incomplete")] if self._open else [])]
        self.final = response_object(self.meta, self.id, self.created_at, "failed", output, error=err)
        return self._closing_frame(wire.Failed, self.final)

    def close(self) -> bytes:
        return b""

    def unstored(self, chunk: bytes) -> bytes:
        """``chunk``, the one that ended the stream, with its closing event's response
        saying ``store: false``: the response turned out not to fit the store."""
        kind, seq, frame = self._closing
        assert self.final is not None and chunk.endswith(frame)
        self.final = msgspec.structs.replace(self.final, store=False)
        return chunk[: len(chunk) - len(frame)] + self._frame(kind(seq, self.final))

    # -- items ----------------------------------------------------------------------------

    def _start(self) -> list[bytes]:
        self._started = True
        shell = response_object(self.meta, self.id, self.created_at, "in_progress")
        out = [self._frame(wire.Created(self._next(), shell)), self._frame(wire.InProgress(self._next(), shell))]
        if (compaction := self.meta.compaction) is not None:
            out += [self._frame(wire.OutputItemAdded(self._next(), 0, compaction)), self._frame(wire.OutputItemDone(self._next(), 0, compaction))]
            self._done.append(compaction)
        return out

    def _text(self, text: str) -> list[bytes]:
        out = [] if self._open == "message" else self._open_item("message")
        self._pieces.append(text)
        return [*out, self._frame(wire.OutputTextDelta(self._next(), self._item_id, self._index, 0, text))]

    def _thinking(self, text: str) -> list[bytes]:
        out = [] if self._open == "reasoning" else self._open_item("reasoning")
        self._pieces.append(text)
        return [*out, self._frame(wire.ReasoningTextDelta(self._next(), self._item_id, self._index, 0, text))]

    def _whole_call(self, call: ToolCall) -> list[bytes]:
        out = self._open_call(call.id, call.name)
        arguments = _json(call.arguments)
        self._pieces.append(arguments)
        out.append(self._frame(wire.ArgumentsDelta(self._next(), self._item_id, self._index, arguments)))
        return out + self._close_item()

    def _steps(self, steps: list[Step]) -> list[bytes]:
        """Fragments as ``function_call_arguments.delta`` pieces of one item per call."""
        out: list[bytes] = []
        for step in steps:
            if isinstance(step, CallOpened):
                out += self._open_call(step.call_id, step.name)
            if step.arguments:
                self._pieces.append(step.arguments)
                out.append(self._frame(wire.ArgumentsDelta(self._next(), self._item_id, self._index, step.arguments)))
        return out

    def _open_call(self, call_id: str | None, name: str) -> list[bytes]:
        out = self._open_item("call")
        self._call = (call_id if call_id else new_call_id(), name)
        return out + [self._frame(wire.OutputItemAdded(self._next(), self._index, self._current("in_progress")))]

    @property
    def _index(self) -> int:
        return len(self._done)

    def _open_item(self, kind: Literal["message", "reasoning", "call"]) -> list[bytes]:
        out = self._close_item()
        self._open, self._pieces = kind, []
        if kind == "call":
            self._item_id = new_function_call_id()
            return out  # announced by _open_call once the call's name is set
        self._item_id = new_message_id() if kind == "message" else new_reasoning_id()
        added = wire.OutputItemAdded(self._next(), self._index, self._current("in_progress"))
        part: wire.OutputText | wire.ReasoningText = wire.OutputText(text="") if kind == "message" else wire.ReasoningText(text="")
        return [*out, self._frame(added), self._frame(wire.ContentPartAdded(self._next(), self._item_id, self._index, 0, part))]

    def _close_item(self) -> list[bytes]:
        if self._open is None:
            return []
        text = "".join(self._pieces)
        index, item_id = self._index, self._item_id
        out: list[bytes] = []
        if self._open == "message":
            out += [
                self._frame(wire.OutputTextDone(self._next(), item_id, index, 0, text)),
                self._frame(wire.ContentPartDone(self._next(), item_id, index, 0, wire.OutputText(text=text))),
            ]
        elif self._open == "reasoning":
            out += [
                self._frame(wire.ReasoningTextDone(self._next(), item_id, index, 0, text)),
                self._frame(wire.ContentPartDone(self._next(), item_id, index, 0, wire.ReasoningText(text=text))),
            ]
        else:
            assert self._call is not None
            out.append(self._frame(wire.ArgumentsDone(self._next(), item_id, index, self._call[1], text)))
        item = self._current("completed")
        out.append(self._frame(wire.OutputItemDone(self._next(), index, item)))
        self._done.append(item)
        self._open, self._pieces, self._call = None, [], None
        return out

    def _current(self, status: Literal["in_progress", "completed", "incomplete"]) -> wire.OutputItem:
        text = "".join(self._pieces)
        if self._open == "message":
            return _message_item(self._item_id, text, status)
        if self._open == "reasoning":
            if status == "in_progress":
                return wire.ReasoningItem(id=self._item_id, summary=[], status=status)
            return _reasoning_item(self._item_id, text, self.meta, status)
        assert self._call is not None
        call_id, name = self._call
        return _call_item(self._item_id, call_id, name, text if status != "in_progress" else "", status)

    def _finish(self, event: Finish) -> list[bytes]:
        out = self._close_item()
        status = status_of(event.reason)
        self.final = response_object(self.meta, self.id, self.created_at, status, list(self._done), event.usage)
        closing = wire.Completed if status == "completed" else wire.Incomplete
        return [*out, self._closing_frame(closing, self.final)]

    def _closing_frame(self, kind: type[_Closing], response: wire.Response) -> bytes:
        seq = self._next()
        frame = self._frame(kind(seq, response))
        self._closing = (kind, seq, frame)  # for unstored()
        return frame

    def _next(self) -> int:
        seq, self._seq = self._seq, self._seq + 1
        return seq

    def _frame(self, payload: msgspec.Struct) -> bytes:
        name = payload.__struct_config__.tag
        return b"event: " + str(name).encode() + b"\ndata: " + _encoder.encode(payload) + b"\n\n"


def _message_item(item_id: str, text: str, status: Literal["in_progress", "completed", "incomplete"]) -> wire.MessageItem:
    content = [] if status == "in_progress" else [wire.OutputText(text=text)]
    return wire.MessageItem(id=item_id, status=status, content=content)


def _reasoning_item(item_id: str, thinking: str, meta: ResponseMeta, status: Literal["in_progress", "completed", "incomplete"]) -> wire.ReasoningItem:
    encrypted = encode_reasoning(thinking) if meta.encrypted_reasoning else None
    return wire.ReasoningItem(
        id=item_id, summary=[], content=[wire.ReasoningText(text=thinking)], encrypted_content=encrypted, status=status
    )


def _call_item(item_id: str, call_id: str | None, name: str, arguments: str, status: Literal["in_progress", "completed", "incomplete"]) -> wire.FunctionCallItem:
    return wire.FunctionCallItem(id=item_id, status=status, call_id=call_id or new_call_id(), name=name, arguments=arguments)


def _usage(usage: Usage) -> wire.Usage:
    details = wire.InputTokensDetails(cached_tokens=usage.cached_tokens or 0)
    return wire.Usage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
        input_tokens_details=details,
    )


def _json(arguments: dict[str, Any]) -> str:
    return _encoder.encode(arguments).decode()



__all__ = ["ResponseMeta", "StreamEncoder", "build_response", "encode_response", "error_code", "meta_for", "response_object"]
