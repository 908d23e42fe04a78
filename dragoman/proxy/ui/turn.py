"""The last playground turn in both dialects: what the gateway made of it.

The page sends a turn through one dialect and keeps what it sent and the stream that
came back; nothing is stored on the server. Shown the turn, this runs the same pure
adapters the gateway runs: the request decoded into the canonical request (the route
then applies the model's defaults and limits, as for a real chat) and written in the
other dialect, and the reply's frames read back into canonical events and written as
the other dialect's stream.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec

from dragoman.adapters import ollama, openai
from dragoman.adapters.aggregate import ResultBuilder
from dragoman.adapters.canonical import ChatRequest, ErrorEvent, Event, Usage
from dragoman.adapters.errors import DragomanError, RequestError

Dialect = Literal["openai", "ollama"]


class Turn(msgspec.Struct, forbid_unknown_fields=True):
    """What the page sends: the body it posted and the raw text it read back."""

    dialect: Dialect
    request: msgspec.Raw
    response: str = ""


class DialectView(msgspec.Struct):
    request: Any  # the JSON body
    response: str  # the stream as sent (SSE or NDJSON)
    translated: bool  # False: as the page sent and received it


class ReplyView(msgspec.Struct):
    content: str
    thinking: str
    finish_reason: str | None
    usage: dict[str, int] | None
    error: str | None
    events: int


class TurnView(msgspec.Struct):
    canonical: dict[str, Any]  # the request as the backend received it
    reply: ReplyView
    dropped: list[str]  # options the OpenAI dialect has no field for
    openai: DialectView
    ollama: DialectView


def decode_turn(body: bytes) -> Turn:
    return _decode(body, Turn, "")


def canonical_request(turn: Turn) -> ChatRequest:
    """The turn's request decoded as its route decodes it (errors name the field)."""
    if turn.dialect == "openai":
        return openai.to_canonical(_decode(turn.request, openai.ChatCompletionRequest, "request"))
    return ollama.to_canonical(_decode(turn.request, ollama.ChatRequest, "request"))


def turn_view(turn: Turn, sent: ChatRequest, served: ChatRequest) -> TurnView:
    """``sent`` is the canonical request as decoded, ``served`` what the backend got
    (defaults merged, max tokens clamped)."""
    events = read_stream(turn.dialect, turn.response)
    as_sent = DialectView(request=msgspec.json.decode(turn.request), response=turn.response, translated=False)
    openai_body, dropped = openai.to_upstream(sent, sent.model)
    if turn.dialect == "openai":
        views = {"openai": as_sent, "ollama": DialectView(
            request=msgspec.json.decode(ollama.to_upstream(sent, sent.model)),
            response=write_stream("ollama", events, sent.model), translated=True,
        )}
    else:
        views = {"ollama": as_sent, "openai": DialectView(
            request=msgspec.json.decode(openai_body),
            response=write_stream("openai", events, sent.model), translated=True,
        )}
    return TurnView(
        canonical=_canonical_json(served), reply=_reply(events), dropped=dropped,
        openai=views["openai"], ollama=views["ollama"],
    )


def read_stream(dialect: Dialect, text: str) -> list[Event]:
    """Canonical events of a stream the gateway sent, read as an upstream's would be.
    A stream cut short (the stop button) ends with the error saying so."""
    decoder = openai.UpstreamStreamDecoder() if dialect == "openai" else ollama.UpstreamStreamDecoder()
    events: list[Event] = []
    for line in text.splitlines():
        events += decoder.feed(line.encode())
    return events + decoder.finish()


def write_stream(dialect: Dialect, events: list[Event], model: str) -> str:
    encoder = openai.StreamEncoder(model, include_usage=True) if dialect == "openai" else ollama.StreamEncoder(model)
    frames = []
    for event in events:
        frames.append(encoder.encode(event))
        if isinstance(event, ErrorEvent):
            break
    frames.append(encoder.close())
    return b"".join(frames).decode()


def _reply(events: list[Event]) -> ReplyView:
    builder = ResultBuilder()
    error = None
    for event in events:
        try:
            builder.add(event)
        except DragomanError as exc:  # an error event: what came before still counts
            error = exc.message
            break
    result = builder.result()
    finished = error is None
    return ReplyView(
        content=result.content,
        thinking=result.thinking,
        finish_reason=result.finish_reason if finished else None,
        usage=_counts(result.usage) if finished else None,
        error=error,
        events=len(events),
    )


def _canonical_json(request: ChatRequest) -> dict[str, Any]:
    """The request without its unset fields (None, empty lists), which say nothing
    here, and never the client's Authorization header."""
    return _pruned(msgspec.to_builtins(msgspec.structs.replace(request, authorization=None)))


def _pruned(value: Any) -> Any:
    if isinstance(value, dict):
        kept = {k: _pruned(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v is not None and v != [] and v != {}}
    if isinstance(value, list):
        return [_pruned(item) for item in value]
    return value


_AT = re.compile(r"(.*?)(?: - at `\$\.?(.*)`)?$", re.S)


def _decode(raw: bytes | msgspec.Raw, type_: type, prefix: str) -> Any:
    """msgspec's errors ("Expected `str`, got `int` - at `$.messages[0].content`") as
    a 400 naming the field first, as the chat routes name it."""
    try:
        return msgspec.json.decode(raw, type=type_)
    except msgspec.ValidationError as exc:
        match = _AT.match(str(exc))
        assert match is not None
        message, path = match.group(1), match.group(2) or ""
        field = ".".join(p for p in (prefix, path) if p).replace(".[", "[")
        raise RequestError(f"{field or 'body'}: {message}", param=field or None) from None
    except msgspec.DecodeError as exc:
        raise RequestError(f"{prefix or 'request body'}: not valid JSON: {exc}") from None


def _counts(usage: Usage) -> dict[str, int]:
    """The counts the backend reported (cached_tokens only where it knows them)."""
    return {name: count for name, count in msgspec.structs.asdict(usage).items() if count is not None}
