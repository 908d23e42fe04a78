"""Each dialect's ReplyFormat: what the client's request asks for (a stream or one body),
and that the reply it writes is the dialect's own (the encoder, the rendered body)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from dragoman.adapters import anthropic, ollama, openai, responses
from dragoman.adapters.aggregate import ChatResult
from dragoman.adapters.canonical import ContentDelta, Finish, RoleStart, Usage
from dragoman.adapters.ollama import generate
from dragoman.adapters.reply import ReplyFormat, StreamEncoder

pytestmark = pytest.mark.unit

RESULT = ChatResult(content="Bonjour", finish_reason="stop", usage=Usage(prompt_tokens=3, completion_tokens=1))


def _openai(body: dict[str, Any]) -> ReplyFormat[StreamEncoder]:
    return openai.reply_for(msgspec.convert({"model": "m", "messages": [], **body}, openai.ChatCompletionRequest))


def _anthropic(body: dict[str, Any]) -> ReplyFormat[StreamEncoder]:
    request = msgspec.convert({"model": "m", "max_tokens": 5, "messages": [], **body}, anthropic.MessagesRequest)
    return anthropic.reply_for(request)


def _ollama(body: dict[str, Any]) -> ReplyFormat[StreamEncoder]:
    return ollama.reply_for(msgspec.json.decode(msgspec.json.encode({"model": "m", **body}), type=ollama.ChatRequest))


def _generate(body: dict[str, Any]) -> ReplyFormat[StreamEncoder]:
    raw = msgspec.json.encode({"model": "m", "prompt": "p", **body})
    return generate.reply_for(msgspec.json.decode(raw, type=ollama.wire.GenerateRequest))


def _responses(body: dict[str, Any]) -> ReplyFormat[StreamEncoder]:
    request = msgspec.convert({"model": "m", "input": "hi", **body}, responses.ResponsesRequest)
    return responses.ResponseReply(responses.meta_for(request, store=False), stream=bool(request.stream))


# (name, reply from the request body, body, streams?, encoder class, media type)
CASES = [
    ("openai default", _openai, {}, False, openai.StreamEncoder, "text/event-stream"),
    ("openai stream", _openai, {"stream": True}, True, openai.StreamEncoder, "text/event-stream"),
    ("openai stream null", _openai, {"stream": None}, False, openai.StreamEncoder, "text/event-stream"),
    ("anthropic default", _anthropic, {}, False, anthropic.StreamEncoder, "text/event-stream"),
    ("anthropic stream", _anthropic, {"stream": True}, True, anthropic.StreamEncoder, "text/event-stream"),
    ("ollama default streams", _ollama, {}, True, ollama.StreamEncoder, "application/x-ndjson"),
    ("ollama stream null streams", _ollama, {"stream": None}, True, ollama.StreamEncoder, "application/x-ndjson"),
    ("ollama stream false", _ollama, {"stream": False}, False, ollama.StreamEncoder, "application/x-ndjson"),
    ("generate default streams", _generate, {}, True, generate.GenerateEncoder, "application/x-ndjson"),
    ("generate stream false", _generate, {"stream": False}, False, generate.GenerateEncoder, "application/x-ndjson"),
    ("responses default", _responses, {}, False, responses.StreamEncoder, "text/event-stream"),
    ("responses stream", _responses, {"stream": True}, True, responses.StreamEncoder, "text/event-stream"),
]


@pytest.mark.parametrize(("name", "make", "body", "streams", "encoder", "media_type"), CASES, ids=[c[0] for c in CASES])
def test_reply_format_is_what_the_request_asked(
    name: str, make: Any, body: dict[str, Any], streams: bool, encoder: type, media_type: str
) -> None:
    reply = make(body)
    assert reply.stream is streams
    made = reply.stream_encoder()
    assert type(made) is encoder
    assert made.media_type == media_type


@pytest.mark.parametrize(
    ("make", "render"),
    [
        (_openai, lambda r: openai.render_response(r, "m")),
        (_anthropic, lambda r: anthropic.render_response(r, "m")),
        (_ollama, lambda r: ollama.render_response(r, "m")),
        (_generate, lambda r: generate.render_response(r, "m")),
    ],
    ids=["openai", "anthropic", "ollama", "generate"],
)
def test_rendered_body_is_the_dialects_own(make: Any, render: Any) -> None:
    ours, theirs = msgspec.json.decode(make({}).render(RESULT)), msgspec.json.decode(render(RESULT))
    for volatile in ("id", "created", "created_at", "system_fingerprint"):
        ours.pop(volatile, None), theirs.pop(volatile, None)
    assert ours == theirs
    assert "Bonjour" in msgspec.json.encode(ours).decode()


def test_responses_body_is_the_response_object_it_stores() -> None:
    reply = _responses({})
    body = msgspec.json.decode(reply.render(RESULT))
    assert body["object"] == "response" and body["status"] == "completed"
    assert body["output"][0]["content"][0]["text"] == "Bonjour"
    assert reply.response(RESULT).status == "completed"


def test_openai_usage_chunk_follows_stream_options() -> None:
    events = [RoleStart(), ContentDelta("Hi"), Finish(usage=Usage(prompt_tokens=2, completion_tokens=1))]
    with_usage = _openai({"stream": True, "stream_options": {"include_usage": True}}).stream_encoder()
    without = _openai({"stream": True}).stream_encoder()
    framed = [b"".join(e.encode(ev) for ev in events) + e.close() for e in (with_usage, without)]
    assert b'"prompt_tokens":2' in framed[0]
    assert b'"prompt_tokens"' not in framed[1]
