"""Canonical request → an Ollama server, and its replies → canonical events (docs/api-mapping.md §5)."""

from __future__ import annotations

import base64
from typing import Any

import msgspec
import pytest

from dragoman.adapters.aggregate import ResultBuilder
from dragoman.adapters.canonical import (
    ChatRequest,
    ContentDelta,
    ErrorEvent,
    Event,
    Finish,
    ImagePart,
    Message,
    ResponseFormat,
    RoleStart,
    SamplingOptions,
    TextPart,
    ThinkingDelta,
    Timings,
    TokenLogprob,
    Tool,
    ToolCall,
    ToolCallDone,
    ToolChoice,
    TopLogprob,
    Usage,
)
from dragoman.adapters.errors import RequestError, UpstreamError
from dragoman.adapters.ollama import (
    StreamEncoder,
    UpstreamStreamDecoder,
    parse_upstream_error,
    parse_upstream_response,
    to_canonical,
    to_upstream,
    wire,
)

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}
USER = Message(role="user", parts=[TextPart("hi")])


def upstream_body(**fields: Any) -> dict[str, Any]:
    request = ChatRequest(model="client-name", messages=[USER], **fields)
    return msgspec.json.decode(to_upstream(request, "upstream-name"))


# -- canonical → /api/chat body -------------------------------------------------------------

TO_UPSTREAM = [
    ("minimal", {}, {}),
    ("stream true written too", {"stream": True}, {"stream": True}),
    (
        "only the set options",
        {"options": SamplingOptions(temperature=0.2, num_predict=64, stop=["x"])},
        {"options": {"temperature": 0.2, "stop": ["x"], "num_predict": 64}},
    ),
    (
        "repeat_penalty stays repeat_penalty",
        {"options": SamplingOptions(repeat_penalty=1.1, frequency_penalty=0.3)},
        {"options": {"repeat_penalty": 1.1, "frequency_penalty": 0.3}},
    ),
    ("json mode", {"response_format": ResponseFormat(type="json")}, {"format": "json"}),
    ("schema", {"response_format": ResponseFormat(type="json_schema", schema=SCHEMA, name="x")}, {"format": SCHEMA}),
    ("text format is absent", {"response_format": ResponseFormat(type="text")}, {}),
    ("think on", {"think": True}, {"think": True}),
    ("think off", {"think": False}, {"think": False}),
    ("think level", {"think": True, "think_level": "high"}, {"think": "high"}),
    ("think level alone", {"think_level": "low"}, {"think": "low"}),
    ("keep_alive seconds", {"keep_alive": 300.0}, {"keep_alive": 300}),
    ("keep_alive fractional", {"keep_alive": 0.5}, {"keep_alive": 0.5}),
    ("keep_alive forever", {"keep_alive": -1.0}, {"keep_alive": -1}),
    ("keep_alive unload", {"keep_alive": 0.0}, {"keep_alive": 0}),
    ("logprobs", {"logprobs": True, "top_logprobs": 3}, {"logprobs": True, "top_logprobs": 3}),
]


@pytest.mark.parametrize(("name", "fields", "expected"), TO_UPSTREAM, ids=[c[0] for c in TO_UPSTREAM])
def test_to_upstream(name: str, fields: dict[str, Any], expected: dict[str, Any]) -> None:
    body = upstream_body(**{"stream": False, **fields})
    # stream is always written: other Ollama-dialect servers may default differently
    assert body == {
        "model": "upstream-name",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": False,
        **expected,
    }


def test_to_upstream_messages() -> None:
    messages = [
        Message(role="system", parts=[TextPart("be brief")]),
        Message(role="user", parts=[ImagePart(PNG, "image/png"), TextPart("what is it?")]),
        Message(
            role="assistant",
            thinking="look up",
            tool_calls=[ToolCall("weather", {"city": "Paris", "unit": "C"}, id="call_a"), ToolCall("time", index=5)],
        ),
        Message(role="tool", parts=[TextPart("18C")], tool_call_id="call_a", tool_name="weather"),
    ]
    body = msgspec.json.decode(to_upstream(ChatRequest(model="x", messages=messages), "x"))
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "what is it?", "images": [base64.b64encode(PNG).decode()]},
        {
            "role": "assistant",
            "thinking": "look up",
            "tool_calls": [
                {
                    "id": "call_a",
                    "function": {"index": 0, "name": "weather", "arguments": {"city": "Paris", "unit": "C"}},
                },
                {"function": {"index": 1, "name": "time", "arguments": {}}},
            ],
        },
        {"role": "tool", "content": "18C", "tool_name": "weather", "tool_call_id": "call_a"},
    ]


TOOLS = [Tool("weather", "Weather now", SCHEMA), Tool("time")]
TOOL_CHOICE = [
    # (name, choice, tools offered, the tool_choice extension field)
    ("auto offers all", ToolChoice(), ["weather", "time"], None),
    ("required offers all and says so", ToolChoice(mode="required"), ["weather", "time"], "required"),
    ("none offers none", ToolChoice(mode="none"), None, None),
    ("function offers only it and names it", ToolChoice(mode="function", name="time"), ["time"],
     {"type": "function", "function": {"name": "time"}}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "choice", "offered", "extension"), TOOL_CHOICE, ids=[c[0] for c in TOOL_CHOICE])
def test_to_upstream_tools(name: str, choice: ToolChoice, offered: list[str] | None, extension: Any) -> None:
    body = upstream_body(tools=TOOLS, tool_choice=choice)
    names = [t["function"]["name"] for t in body["tools"]] if "tools" in body else None
    assert names == offered
    assert body.get("tool_choice") == extension
    if offered:
        assert body["tools"][0]["type"] == "function"
    if offered and "weather" in offered:
        assert body["tools"][0]["function"] == {"name": "weather", "description": "Weather now", "parameters": SCHEMA}


def test_round_trip_through_the_native_client_side() -> None:
    request = ChatRequest(
        model="m",
        messages=[
            Message(role="user", parts=[ImagePart(PNG, "image/png"), TextPart("hi")]),
            Message(role="assistant", tool_calls=[ToolCall("f", {"b": 1, "a": [2]}, id="call_1")]),
            Message(role="tool", parts=[TextPart("ok")], tool_call_id="call_1", tool_name="f"),
        ],
        tools=[Tool("f", "does f", SCHEMA)],
        options=SamplingOptions(temperature=0.1, top_k=5, mirostat=1, stop=["x"]),
        response_format=ResponseFormat(type="json_schema", schema=SCHEMA),
        think=True,
        think_level="medium",
        logprobs=True,
        top_logprobs=2,
        stream=True,
        keep_alive=60.0,
    )
    again = to_canonical(msgspec.json.decode(to_upstream(request, "m"), type=wire.ChatRequest))
    assert again == request


# -- upstream NDJSON → events ----------------------------------------------------------------


def ndjson(*objects: dict[str, Any]) -> list[bytes]:
    return [msgspec.json.encode(o) + b"\n" for o in objects]


def msg(**fields: Any) -> dict[str, Any]:
    return {
        "model": "up",
        "created_at": "2026-01-01T00:00:00Z",
        "message": {"role": "assistant", "content": "", **fields},
        "done": False,
    }


DONE = {
    "model": "up",
    "created_at": "2026-01-01T00:00:00Z",
    "message": {"role": "assistant", "content": ""},
    "done": True,
    "done_reason": "stop",
    "total_duration": 900,
    "load_duration": 100,
    "prompt_eval_count": 12,
    "prompt_eval_duration": 200,
    "eval_count": 5,
    "eval_duration": 500,
}
FINISH = Finish("stop", Usage(12, 5), Timings(900, 100, 200, 500))


def decode_stream(raw_lines: list[bytes]) -> list[Event]:
    decoder = UpstreamStreamDecoder()
    events: list[Event] = []
    for line in raw_lines:
        events += decoder.feed(line)
    return events + decoder.finish()


DECODE = [
    (
        "content and thinking",
        ndjson(msg(thinking="hm"), msg(content="Hel"), msg(content="lo"), DONE),
        [RoleStart(), ThinkingDelta("hm"), ContentDelta("Hel"), ContentDelta("lo"), FINISH],
    ),
    (
        "tool calls get stable increasing indices across lines",
        ndjson(
            msg(tool_calls=[{"id": "call_x", "function": {"index": 0, "name": "a", "arguments": {"k": 1}}}]),
            msg(
                tool_calls=[
                    {"function": {"index": 0, "name": "b", "arguments": '{"q": "s"}'}},
                    {"function": {"name": "c"}},
                ]
            ),
            DONE,
        ),
        [
            RoleStart(),
            ToolCallDone(ToolCall("a", {"k": 1}, id="call_x", index=0)),
            ToolCallDone(ToolCall("b", {"q": "s"}, index=1)),
            ToolCallDone(ToolCall("c", {}, index=2)),
            FINISH,
        ],
    ),
    (
        "length",
        ndjson(msg(content="a"), {**DONE, "done_reason": "length"}),
        [RoleStart(), ContentDelta("a"), Finish("length", FINISH.usage, FINISH.timings)],
    ),
    (
        "unknown done_reason is stop and missing metrics are 0",
        ndjson({"model": "up", "done": True, "done_reason": "weird"}),
        [RoleStart(), Finish("stop")],
    ),
    (
        "logprobs",
        ndjson(
            {
                **msg(content="A"),
                "logprobs": [
                    {"token": "A", "logprob": -0.5, "top_logprobs": [{"token": "B", "logprob": -1.0, "bytes": [66]}]}
                ],
            },
            DONE,
        ),
        [
            RoleStart(),
            # on the text they belong to, as the upstream sent them
            ContentDelta("A", [TokenLogprob("A", -0.5, None, [TopLogprob("B", -1.0, [66])])]),
            FINISH,
        ],
    ),
    (
        "blank and CRLF lines are fine",
        [b"\n", msgspec.json.encode(msg(content="a")) + b"\r\n", b"", *ndjson(DONE)],
        [RoleStart(), ContentDelta("a"), FINISH],
    ),
    ("lines after done are ignored", ndjson(DONE, msg(content="late")), [RoleStart(), FINISH]),
    (
        "error line",
        ndjson(msg(content="a"), {"error": "out of memory"}),
        [RoleStart(), ContentDelta("a"), ErrorEvent("out of memory", status=500)],
    ),
    ("error line with status", ndjson({"error": "busy", "status": 503}), [ErrorEvent("busy", status=503)]),
]


@pytest.mark.parametrize(("name", "raw", "expected"), DECODE, ids=[c[0] for c in DECODE])
def test_upstream_stream_decoder(name: str, raw: list[bytes], expected: list[Event]) -> None:
    assert decode_stream(raw) == expected


AFTER = ndjson(msg(content="after"), DONE)  # ignored once the stream has failed
FAILURES = [
    ("malformed JSON", [b'{"model": "up", "mess', *AFTER], "upstream sent a line that could not be read"),
    ("wrong field type", [b'{"done": "yes"}', *AFTER], "upstream sent a line that could not be read"),
    (
        "malformed string arguments",
        ndjson(msg(tool_calls=[{"function": {"name": "f", "arguments": "{oops"}}]), msg(content="after"), DONE),
        "not valid JSON",
    ),
    ("ended before done", ndjson(msg(content="a")), "ended before"),
]


@pytest.mark.parametrize(("name", "raw", "reason"), FAILURES, ids=[c[0] for c in FAILURES])
def test_upstream_stream_failures_become_one_error_event(name: str, raw: list[bytes], reason: str) -> None:
    events = decode_stream(raw)
    errors = [e for e in events if isinstance(e, ErrorEvent)]
    assert len(errors) == 1 and events[-1] is errors[0]
    assert reason in errors[0].message and errors[0].status == 502


def test_decoder_stops_after_an_error() -> None:
    decoder = UpstreamStreamDecoder()
    assert isinstance(decoder.feed(b"{not json")[0], ErrorEvent)
    assert decoder.feed(msgspec.json.encode(msg(content="x"))) == []
    assert decoder.finish() == []


RESPONSES = [
    (
        "one object",
        msgspec.json.encode({**DONE, "message": {"role": "assistant", "content": "hi", "thinking": "t"}}),
        [RoleStart(), ThinkingDelta("t"), ContentDelta("hi"), FINISH],
    ),
    (
        "pretty-printed object",
        msgspec.json.format(msgspec.json.encode({**DONE, "message": {"role": "assistant", "content": "hi"}})),
        [RoleStart(), ContentDelta("hi"), FINISH],
    ),
    (
        "NDJSON body though stream was false",
        b"".join(ndjson(msg(content="h"), msg(content="i"), DONE)),
        [RoleStart(), ContentDelta("h"), ContentDelta("i"), FINISH],
    ),
    ("error body", b'{"error":"boom"}', [ErrorEvent("boom", status=500)]),
]


@pytest.mark.parametrize(("name", "body", "expected"), RESPONSES, ids=[c[0] for c in RESPONSES])
def test_parse_upstream_response(name: str, body: bytes, expected: list[Event]) -> None:
    assert parse_upstream_response(body) == expected


def test_upstream_stream_relayed_to_a_native_client_unchanged() -> None:
    raw = ndjson(
        msg(thinking="hm"),
        msg(content="Hi"),
        msg(tool_calls=[{"id": "call_a", "function": {"index": 0, "name": "f", "arguments": {"z": 1, "a": 2}}}]),
        DONE,
    )
    encoder = StreamEncoder("up")
    relayed = b"".join(encoder.encode(e) for e in decode_stream(raw))
    strip = lambda line: {k: v for k, v in msgspec.json.decode(line).items() if k != "created_at"}  # noqa: E731
    assert [strip(line) for line in relayed.splitlines()] == [strip(line) for line in raw]
    builder = ResultBuilder()
    for event in parse_upstream_response(b"".join(raw)):
        builder.add(event)
    assert builder.result().tool_calls == [ToolCall("f", {"z": 1, "a": 2}, id="call_a", index=0)]


# -- upstream errors -------------------------------------------------------------------------

ERRORS = [
    ("404 keeps Ollama's wording", 404, b'{"error":"model \'x\' not found"}', UpstreamError, "model 'x' not found"),
    ("400 is a request error", 400, b'{"error":"invalid think value"}', RequestError, "invalid think value"),
    ("plain text body", 500, b"Internal Server Error\n", UpstreamError, "Internal Server Error"),
    ("empty body", 502, b"", UpstreamError, "upstream answered HTTP 502"),
]


@pytest.mark.parametrize(("name", "status", "body", "cls", "message"), ERRORS, ids=[c[0] for c in ERRORS])
def test_parse_upstream_error(name: str, status: int, body: bytes, cls: type, message: str) -> None:
    err = parse_upstream_error(status, body)
    assert type(err) is cls and err.status == status and err.message == message
