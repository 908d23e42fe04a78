"""What an upstream sent that does not decode — malformed, or nested past what msgspec
can recurse — is the upstream's 502 in every dialect's parser (whole replies, stream
lines, error bodies, embeddings), never an exception out of it; and a client's tool-call
arguments nested that deep are the client's 400, naming the field, in both OpenAI dialects."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from dragoman.adapters import ollama, openai, responses
from dragoman.adapters.anthropic import upstream_reply as anthropic
from dragoman.adapters.canonical import ErrorEvent, Event
from dragoman.adapters.errors import DragomanError, RequestError
from dragoman.adapters.ollama.embed import parse_upstream_embed
from dragoman.adapters.openai.embed import parse_upstream_embeddings
from dragoman.adapters.responses import upstream_reply as responses_upstream
from dragoman.adapters.responses import wire as responses_wire
from dragoman.adapters.upstream_json import Unreadable, read_json, sse_data

DEEP = b"[" * 5000 + b"]" * 5000

SSE_LINES = [
    (b"data: {\"a\":1}", b"{\"a\":1}"),
    (b"data:{\"a\":1}\r", b"{\"a\":1}"),
    (b"data: [DONE]", b"[DONE]"),
    (b"{\"error\":{\"message\":\"no\"}}", b"{\"error\":{\"message\":\"no\"}}"),  # a bare JSON error body instead of SSE
    (b"event: message_start", None),
    (b": OPENROUTER PROCESSING", None),
    (b"", None),
    (b"id: 7", None),
]  # fmt: skip


@pytest.mark.parametrize(("line", "want"), SSE_LINES)
def test_sse_data(line: bytes, want: bytes | None) -> None:
    assert sse_data(line) == want


@pytest.mark.parametrize(("body", "says"), [(b"{nope", "that could not be read: "), (DEEP, "nested too deeply to decode")])
def test_read_json(body: bytes, says: str) -> None:
    with pytest.raises(Unreadable) as caught:
        read_json(msgspec.json.decode, body)
    assert str(caught.value).startswith(says)
    assert read_json(msgspec.json.decode, b"[1]") == [1]


def stream(decoder: Any, line: bytes) -> list[Event]:
    return decoder.feed(line) + decoder.finish()


WHOLE: list[tuple[str, Callable[[bytes], list[Event]], bytes]] = [
    ("openai", openai.parse_upstream_response, b'{"choices":[],"x":%s}'),
    ("responses", responses_upstream.parse_upstream_response, b'{"id":"r","status":"completed","output":[],"x":%s}'),
    ("anthropic", anthropic.parse_upstream_response, b'{"type":"message","content":[],"x":%s}'),
    ("ollama", ollama.parse_upstream_response, b'{"message":{"role":"assistant","content":""},"x":%s}'),
]  # fmt: skip
LINES: list[tuple[str, Callable[[], Any], bytes]] = [
    ("openai", openai.UpstreamStreamDecoder, b'data: {"choices":[],"x":%s}'),
    ("responses", responses_upstream.UpstreamStreamDecoder, b'data: {"type":"response.created","response":{"x":%s}}'),
    ("anthropic", anthropic.UpstreamStreamDecoder, b'data: {"type":"message_start","message":{"x":%s}}'),
    ("ollama", ollama.UpstreamStreamDecoder, b'{"message":{"role":"assistant","content":""},"x":%s}'),
]  # fmt: skip


@pytest.mark.parametrize(("name", "parse", "shape"), WHOLE, ids=[c[0] for c in WHOLE])
def test_a_whole_reply_nested_too_deeply(name: str, parse: Callable[[bytes], list[Event]], shape: bytes) -> None:
    *_, last = parse(shape % DEEP)
    assert isinstance(last, ErrorEvent) and last.status == 502
    assert last.message == "upstream sent a reply nested too deeply to decode"


@pytest.mark.parametrize(("name", "decoder", "shape"), LINES, ids=[c[0] for c in LINES])
def test_a_stream_line_nested_too_deeply_or_malformed(name: str, decoder: Callable[[], Any], shape: bytes) -> None:
    for body, says in [(shape % DEEP, "nested too deeply to decode"), (shape % b"{nope", "that could not be read: ")]:
        events = stream(decoder(), body)
        errors = [e for e in events if isinstance(e, ErrorEvent)]
        assert len(errors) == 1 and errors[0].status == 502, events
        assert errors[0].message.startswith("upstream sent a ") and says in errors[0].message


ERRORS = [("openai", openai.parse_upstream_error), ("anthropic", anthropic.parse_upstream_error),
          ("ollama", ollama.parse_upstream_error)]  # fmt: skip


@pytest.mark.parametrize(("name", "parse"), ERRORS, ids=[c[0] for c in ERRORS])
def test_an_error_body_nested_too_deeply_keeps_the_status(name: str, parse: Callable[[int, bytes], DragomanError]) -> None:
    error = parse(429, b'{"error":{"message":"slow down","x":%s}}' % DEEP)
    assert isinstance(error, DragomanError) and error.status == 429


@pytest.mark.parametrize("parse", [parse_upstream_embeddings, parse_upstream_embed])
def test_an_embeddings_reply_nested_too_deeply(parse: Callable[[bytes, int], Any]) -> None:
    with pytest.raises(ValueError, match="^upstream sent an embeddings? reply nested too deeply to decode$"):
        parse(b'{"data":[],"embeddings":[],"x":%s}' % DEEP, 1)


def test_client_arguments_nested_too_deeply_name_the_field() -> None:
    arguments = '{"a":' + "[" * 5000 + "]" * 5000 + "}"
    body = {"model": "m", "input": [
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": arguments},
        {"type": "function_call_output", "call_id": "c1", "output": "x"},
    ]}  # fmt: skip
    request = msgspec.json.decode(msgspec.json.encode(body), type=responses_wire.ResponsesRequest)
    with pytest.raises(RequestError) as caught:
        responses.to_canonical(request)
    assert caught.value.param == "input[0].arguments" and "nested too deeply" in str(caught.value)
    broken = msgspec.json.decode(msgspec.json.encode({**body, "input": [{**body["input"][0], "arguments": "{nope"}]}),
                                 type=responses_wire.ResponsesRequest)  # fmt: skip
    with pytest.raises(RequestError, match=r"^input\[0\].arguments: not valid JSON"):
        responses.to_canonical(broken)
