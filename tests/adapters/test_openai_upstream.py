"""Canonical requests → OpenAI-speaking upstreams, and their replies back (docs/api-mapping.md §5)."""

from __future__ import annotations

import base64
from typing import Any, Callable

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
    Logprobs,
    Message,
    ResponseFormat,
    RoleStart,
    SamplingOptions,
    TextPart,
    ThinkingDelta,
    TokenLogprob,
    Tool,
    ToolCall,
    ToolCallDone,
    ToolCallFragment,
    ToolChoice,
    TopLogprob,
    Usage,
)
from dragoman.adapters.errors import DragomanError, Overloaded, RequestError, UpstreamError
from dragoman.adapters.openai import (
    ChatCompletionRequest,
    UpstreamStreamDecoder,
    parse_upstream_error,
    parse_upstream_response,
    to_canonical,
    to_upstream,
)

PNG = b"\x89PNG\r\n\x1a\n" + bytes(24)
HI = [Message(role="user", parts=[TextPart("hi")])]


def request(**fields: Any) -> ChatRequest:
    return ChatRequest(**({"model": "local-name", "messages": HI} | fields))


def upstream(req: ChatRequest, **kwargs: Any) -> tuple[dict[str, Any], list[str]]:
    raw, dropped = to_upstream(req, "upstream-name", **kwargs)
    return msgspec.json.decode(raw), dropped


# -- canonical request -> upstream body --------------------------------------------------

Getter = Callable[[dict[str, Any]], Any]
ABSENT = object()

BODY_CASES: list[tuple[str, ChatRequest, Getter, Any]] = [
    ("upstream model name", request(), lambda b: b["model"], "upstream-name"),
    ("non-streaming", request(), lambda b: (b["stream"], b.get("stream_options", ABSENT)), (False, ABSENT)),
    ("streaming asks for usage", request(stream=True), lambda b: (b["stream"], b["stream_options"]),
     (True, {"include_usage": True})),
    ("unset sampling stays unset", request(), lambda b: sorted(b), ["messages", "model", "stream"]),
    ("sampling at top level",
     request(options=SamplingOptions(temperature=0.2, top_p=0.9, seed=1, stop=["x"], presence_penalty=0.1,
                                     frequency_penalty=0.3)),
     lambda b: [b[k] for k in ("temperature", "top_p", "seed", "stop", "presence_penalty", "frequency_penalty")],
     [0.2, 0.9, 1, ["x"], 0.1, 0.3]),
    ("num_predict is max_tokens", request(options=SamplingOptions(num_predict=64)), lambda b: b["max_tokens"], 64),
    ("unlimited num_predict is omitted", request(options=SamplingOptions(num_predict=-1)),
     lambda b: b.get("max_tokens", ABSENT), ABSENT),
    ("think level is reasoning_effort", request(think=True, think_level="medium"), lambda b: b["reasoning_effort"], "medium"),
    ("think high", request(think=True, think_level="high"), lambda b: b["reasoning_effort"], "high"),
    ("think false is none", request(think=False), lambda b: b["reasoning_effort"], "none"),
    ("think true at the default depth", request(think=True), lambda b: b["reasoning_effort"], "medium"),
    ("think unset", request(), lambda b: b.get("reasoning_effort", ABSENT), ABSENT),
    ("json format is json_object", request(response_format=ResponseFormat(type="json")),
     lambda b: b["response_format"], {"type": "json_object"}),
    ("schema format is json_schema", request(response_format=ResponseFormat(type="json_schema", schema={"type": "object"})),
     lambda b: b["response_format"], {"type": "json_schema", "json_schema": {"name": "schema", "schema": {"type": "object"}}}),
    ("schema name and strict kept",
     request(response_format=ResponseFormat(type="json_schema", schema={"type": "object"}, name="city", strict=True)),
     lambda b: b["response_format"]["json_schema"], {"name": "city", "schema": {"type": "object"}, "strict": True}),
    ("text format omitted", request(), lambda b: b.get("response_format", ABSENT), ABSENT),
    ("tools", request(tools=[Tool(name="f", description="does f", parameters={"type": "object"})]),
     lambda b: b["tools"], [{"type": "function", "function": {"name": "f", "description": "does f",
                                                              "parameters": {"type": "object"}}}]),
    ("tool_choice auto omitted", request(tools=[Tool(name="f")]), lambda b: b.get("tool_choice", ABSENT), ABSENT),
    ("tool_choice none", request(tools=[Tool(name="f")], tool_choice=ToolChoice(mode="none")),
     lambda b: b["tool_choice"], "none"),
    ("tool_choice function", request(tools=[Tool(name="f")], tool_choice=ToolChoice(mode="function", name="f")),
     lambda b: b["tool_choice"], {"type": "function", "function": {"name": "f"}}),
    ("tool_choice without tools omitted", request(tool_choice=ToolChoice(mode="none")),
     lambda b: b.get("tool_choice", ABSENT), ABSENT),
    ("logprobs", request(logprobs=True, top_logprobs=3), lambda b: (b["logprobs"], b["top_logprobs"]), (True, 3)),
    ("logit_bias with string keys", request(logit_bias={50256: -100.0}), lambda b: b["logit_bias"], {"50256": -100.0}),
    ("no logit_bias, no field", request(), lambda b: b.get("logit_bias", ABSENT), ABSENT),
    ("image parts with a sniffed data uri",
     request(messages=[Message(role="user", parts=[TextPart("what?"), ImagePart(data=PNG, mime_type="image/jpeg")])]),
     lambda b: b["messages"][0]["content"],
     [{"type": "text", "text": "what?"},
      {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()}}]),
    ("text-only content is a string", request(), lambda b: b["messages"], [{"role": "user", "content": "hi"}]),
    ("assistant call: JSON string arguments, null content",
     request(messages=[*HI, Message(role="assistant", tool_calls=[ToolCall(name="f", arguments={"b": 1, "a": 2}, id="c1")])]),
     lambda b: b["messages"][1],
     {"role": "assistant", "content": None,
      "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"b":1,"a":2}'}}]}),
    ("tool result carries tool_call_id",
     request(messages=[*HI, Message(role="assistant", tool_calls=[ToolCall(name="f", id="c1")]),
                       Message(role="tool", parts=[TextPart("42")], tool_call_id="c1", tool_name="f")]),
     lambda b: b["messages"][2], {"role": "tool", "tool_call_id": "c1", "content": "42"}),
    ("thinking of earlier turns is not sent",
     request(messages=[*HI, Message(role="assistant", parts=[TextPart("4")], thinking="2+2")]),
     lambda b: b["messages"][1], {"role": "assistant", "content": "4"}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "req", "get", "expected"), BODY_CASES, ids=[c[0] for c in BODY_CASES])
def test_upstream_body(name: str, req: ChatRequest, get: Getter, expected: Any) -> None:
    sent, _ = upstream(req)
    assert get(sent) == expected


def test_ollama_style_tool_results_are_paired_with_their_calls() -> None:
    """Ollama clients send calls without ids and results with only ``tool_name``."""
    calls = [ToolCall(name="get_weather", arguments={"city": "Paris"}), ToolCall(name="get_time")]
    sent, _ = upstream(request(messages=[
        *HI,
        Message(role="assistant", tool_calls=calls),
        Message(role="tool", parts=[TextPart("12:00")], tool_name="get_time"),
        Message(role="tool", parts=[TextPart("sunny")], tool_name="get_weather"),
    ]))  # fmt: skip
    weather_id, time_id = (c["id"] for c in sent["messages"][1]["tool_calls"])
    assert weather_id != time_id and weather_id.startswith("call_")
    assert [m["tool_call_id"] for m in sent["messages"][2:]] == [time_id, weather_id]


OPTION_CASES: list[tuple[str, SamplingOptions, list[str]]] = [
    ("nothing to drop", SamplingOptions(temperature=0.5), []),
    ("ollama-only knobs", SamplingOptions(top_k=40, min_p=0.05, repeat_penalty=1.1), ["top_k", "min_p", "repeat_penalty"]),
    ("context and mirostat", SamplingOptions(num_ctx=4096, mirostat=2, repeat_last_n=64),
     ["repeat_last_n", "mirostat", "num_ctx"]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "options", "extras"), OPTION_CASES, ids=[c[0] for c in OPTION_CASES])
def test_options_without_an_openai_field(name: str, options: SamplingOptions, extras: list[str]) -> None:
    dropped_body, dropped = upstream(request(options=options))
    assert dropped == extras
    assert not set(extras) & set(dropped_body)
    extra_body, none_dropped = upstream(request(options=options), extra_options=True)
    assert none_dropped == []
    assert {k: extra_body[k] for k in extras} == {k: getattr(options, k) for k in extras}


def test_repeat_penalty_is_never_frequency_penalty() -> None:
    for extra_options in (False, True):
        sent, _ = upstream(request(options=SamplingOptions(repeat_penalty=1.3)), extra_options=extra_options)
        assert "frequency_penalty" not in sent


def test_round_trip_through_our_own_client_side() -> None:
    """What we send an OpenAI upstream reads back as the same request."""
    original = request(
        messages=[
            Message(role="system", parts=[TextPart("be brief")]),
            Message(role="user", parts=[TextPart("look"), ImagePart(data=PNG, mime_type="image/png")]),
            Message(role="assistant", tool_calls=[ToolCall(name="f", arguments={"x": [1, 2]}, id="c1")]),
            Message(role="tool", parts=[TextPart("done")], tool_call_id="c1", tool_name="f"),
        ],
        tools=[Tool(name="f", parameters={"type": "object"})],
        tool_choice=ToolChoice(mode="required"),
        options=SamplingOptions(temperature=0.1, top_p=0.5, seed=3, num_predict=9, stop=["\n"], frequency_penalty=0.2),
        response_format=ResponseFormat(type="json_schema", schema={"type": "object"}, name="out"),
        think=True,
        think_level="low",
        logprobs=True,
        top_logprobs=2,
        stream=True,
    )
    raw, _ = to_upstream(original, "local-name")
    back = to_canonical(msgspec.json.decode(raw, type=ChatCompletionRequest))
    assert back == original


# -- upstream non-streaming reply -> events ----------------------------------------------


def reply(message: dict[str, Any], finish: str | None = "stop", **extra: Any) -> bytes:
    choice = {"index": 0, "message": message, "finish_reason": finish} | extra
    return msgspec.json.encode({"id": "x", "object": "chat.completion", "choices": [choice],
                                "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}})  # fmt: skip


USAGE = Usage(prompt_tokens=5, completion_tokens=2)
UPSTREAM_LOGPROBS = {"content": [{"token": "a", "logprob": -0.5, "bytes": [97],
                                  "top_logprobs": [{"token": "a", "logprob": -0.5, "bytes": [97]}]}]}  # fmt: skip
LOGPROB = TokenLogprob(token="a", logprob=-0.5, bytes=[97], top_logprobs=[TopLogprob("a", -0.5, [97])])
# Logprobs ride on the text they belong to; without text they are an event of their own.
CONTENT_WITH_LOGPROBS = ContentDelta("a", [LOGPROB])
LOGPROB_EVENT = Logprobs([LOGPROB])

RESPONSE_CASES: list[tuple[str, bytes, list[Event]]] = [
    ("text", reply({"role": "assistant", "content": "hello"}),
     [RoleStart(), ContentDelta("hello"), Finish(usage=USAGE)]),
    ("reasoning_content", reply({"role": "assistant", "content": "4", "reasoning_content": "2+2"}),
     [RoleStart(), ThinkingDelta("2+2"), ContentDelta("4"), Finish(usage=USAGE)]),
    ("reasoning (Ollama's spelling)", reply({"role": "assistant", "content": "4", "reasoning": "2+2"}),
     [RoleStart(), ThinkingDelta("2+2"), ContentDelta("4"), Finish(usage=USAGE)]),
    ("tool calls", reply({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}},
        {"id": "c2", "type": "function", "function": {"name": "g", "arguments": ""}}]}, "tool_calls"),
     [RoleStart(), ToolCallDone(ToolCall(name="f", arguments={"a": 1}, id="c1", index=0)),
      ToolCallDone(ToolCall(name="g", arguments={}, id="c2", index=1)), Finish(reason="tool_calls", usage=USAGE)]),
    ("length", reply({"content": "abc"}, "length"), [RoleStart(), ContentDelta("abc"), Finish(reason="length", usage=USAGE)]),
    ("content_filter is a stop", reply({"content": ""}, "content_filter"), [RoleStart(), Finish(usage=USAGE)]),
    ("logprobs", reply({"content": "a"}, logprobs=UPSTREAM_LOGPROBS),
     [RoleStart(), CONTENT_WITH_LOGPROBS, Finish(usage=USAGE)]),
    ("logprobs of a reply without text", reply({"content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, "tool_calls", logprobs=UPSTREAM_LOGPROBS),
     [RoleStart(), ToolCallDone(ToolCall(name="f", arguments={}, id="c1", index=0)), LOGPROB_EVENT,
      Finish(reason="tool_calls", usage=USAGE)]),
    ("no usage", msgspec.json.encode({"choices": [{"message": {"content": "x"}, "finish_reason": "stop"}]}),
     [RoleStart(), ContentDelta("x"), Finish()]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "raw", "events"), RESPONSE_CASES, ids=[c[0] for c in RESPONSE_CASES])
def test_parse_upstream_response(name: str, raw: bytes, events: list[Event]) -> None:
    assert parse_upstream_response(raw) == events


BAD_RESPONSE_CASES: list[tuple[str, bytes, int, str]] = [
    ("not JSON", b"<html>bad gateway</html>", 502, "could not be read"),
    ("error object", b'{"error":{"message":"model overloaded","type":"server_error","code":503}}', 503, "model overloaded"),
    ("error string", b'{"error":"boom"}', 502, "boom"),
    ("no choices", b'{"choices":[]}', 502, "no choices"),
    ("arguments not JSON", reply({"tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{oops"}}]}),
     502, "not valid JSON"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "raw", "status", "text"), BAD_RESPONSE_CASES, ids=[c[0] for c in BAD_RESPONSE_CASES])
def test_bad_upstream_response_is_an_error_event(name: str, raw: bytes, status: int, text: str) -> None:
    [event] = parse_upstream_response(raw)
    assert isinstance(event, ErrorEvent)
    assert event.status == status and text in event.message


# -- upstream stream -> events -----------------------------------------------------------


def sse(*chunks: dict[str, Any] | str) -> list[bytes]:
    """The lines of an SSE body, blank separators included."""
    lines: list[bytes] = []
    for chunk in chunks:
        payload = chunk.encode() if isinstance(chunk, str) else msgspec.json.encode(chunk)
        lines += [b"data: " + payload + b"\n", b"\n"]
    return lines


def delta(finish: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"id": "u", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": fields, "finish_reason": finish}]}


def decode_stream(lines: list[bytes], *, eof: bool = True) -> list[Event]:
    decoder = UpstreamStreamDecoder()
    events = [e for line in lines for e in decoder.feed(line)]
    return events + (decoder.finish() if eof else [])


USAGE_CHUNK = {"id": "u", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}


def call_delta(index: int | None, arguments: str, call_id: str | None = None, name: str | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"function": {"arguments": arguments}}
    if index is not None:
        call["index"] = index
    if call_id is not None:
        call |= {"id": call_id, "type": "function"}
        call["function"]["name"] = name
    return delta(tool_calls=[call])


STREAM_CASES: list[tuple[str, list[bytes], list[Event]]] = [
    ("text with usage in a later chunk",
     sse(delta(role="assistant", content=""), delta(content="Hel"), delta(content="lo"), delta("stop"), USAGE_CHUNK, "[DONE]"),
     [RoleStart(), ContentDelta("Hel"), ContentDelta("lo"), Finish(usage=USAGE)]),
    ("reasoning_content deltas", sse(delta(reasoning_content="hm"), delta(content="ok", finish="stop"), "[DONE]"),
     [RoleStart(), ThinkingDelta("hm"), ContentDelta("ok"), Finish()]),
    ("reasoning deltas", sse(delta(reasoning="hm"), delta("stop"), "[DONE]"), [RoleStart(), ThinkingDelta("hm"), Finish()]),
    ("tool-call fragments", sse(
        call_delta(0, "", "c1", "get_weather"), call_delta(0, '{"city":'), call_delta(0, '"Paris"}'),
        call_delta(1, "{}", "c2", "get_time"), delta("tool_calls"), "[DONE]"),
     [RoleStart(), ToolCallFragment(index=0, id="c1", name="get_weather", arguments=""),
      ToolCallFragment(index=0, arguments='{"city":'), ToolCallFragment(index=0, arguments='"Paris"}'),
      ToolCallFragment(index=1, id="c2", name="get_time", arguments="{}"), Finish(reason="tool_calls")]),
    ("calls without index", sse(call_delta(None, '{"a":', "c1", "f"), call_delta(None, "1}"),
                                call_delta(None, "{}", "c2", "g"), delta("tool_calls"), "[DONE]"),
     [RoleStart(), ToolCallFragment(index=0, id="c1", name="f", arguments='{"a":'), ToolCallFragment(index=0, arguments="1}"),
      ToolCallFragment(index=1, id="c2", name="g", arguments="{}"), Finish(reason="tool_calls")]),
    ("length", sse(delta(content="a"), delta("length"), "[DONE]"), [RoleStart(), ContentDelta("a"), Finish(reason="length")]),
    ("content_filter is a stop", sse(delta("content_filter"), "[DONE]"), [RoleStart(), Finish()]),
    ("logprobs", sse({"choices": [{"index": 0, "delta": {"content": "a"}, "logprobs": UPSTREAM_LOGPROBS}]}, delta("stop"),
                     "[DONE]"),
     [RoleStart(), CONTENT_WITH_LOGPROBS, Finish()]),
    ("logprobs on a chunk without text", sse({"choices": [{"index": 0, "delta": {"content": ""}, "logprobs": UPSTREAM_LOGPROBS}]},
                                             delta("stop"), "[DONE]"),
     [RoleStart(), LOGPROB_EVENT, Finish()]),
    ("comments, fields and CRLF are skipped",
     [b": keep-alive\r\n", b"event: message\r\n", b"id: 7\r\n", b'data:{"choices":[{"delta":{"content":"x"}}]}\r\n',
      b"\r\n", b"data: [DONE]\r\n"],
     [RoleStart(), ContentDelta("x"), Finish()]),
    ("EOF after finish_reason without [DONE]", sse(delta(content="x"), delta("stop"), USAGE_CHUNK),
     [RoleStart(), ContentDelta("x"), Finish(usage=USAGE)]),
    ("EOF before finish_reason", sse(delta(content="x")),
     [RoleStart(), ContentDelta("x"), ErrorEvent("upstream stream ended before the reply was complete", status=502)]),
    ("error event mid-stream, rest ignored",
     sse(delta(content="x"), {"error": {"message": "out of memory", "code": 503}}, delta(content="y"), "[DONE]"),
     [RoleStart(), ContentDelta("x"), ErrorEvent("upstream error: out of memory", status=503)]),
    ("bare JSON error line", [b'{"error":"model not loaded"}\n'], [ErrorEvent("upstream error: model not loaded", status=502)]),
    ("lines after [DONE] ignored", sse(delta("stop"), "[DONE]", delta(content="late")), [RoleStart(), Finish()]),
    ("[DONE] alone", sse("[DONE]"), [RoleStart(), Finish()]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "lines", "events"), STREAM_CASES, ids=[c[0] for c in STREAM_CASES])
def test_upstream_stream(name: str, lines: list[bytes], events: list[Event]) -> None:
    assert decode_stream(lines) == events


def test_malformed_chunk_is_an_error_event_not_an_exception() -> None:
    events = decode_stream(sse(delta(content="x"), "{not json", delta(content="y"), "[DONE]"))
    assert events[:2] == [RoleStart(), ContentDelta("x")]
    [error] = events[2:]
    assert isinstance(error, ErrorEvent) and error.status == 502 and "could not be read" in error.message


def test_streamed_fragments_fold_into_whole_calls() -> None:
    """docs/api-mapping.md §5: a native (Ollama) client gets whole calls with object arguments."""
    lines = sse(call_delta(0, "", "c1", "get_weather"), call_delta(0, '{"city":'), call_delta(0, '"Paris"}'),
                call_delta(1, '{"zone":"CET"}', "c2", "get_time"), delta("tool_calls"), USAGE_CHUNK, "[DONE]")  # fmt: skip
    builder = ResultBuilder()
    for event in decode_stream(lines):
        builder.add(event)
    result = builder.result()
    assert result.tool_calls == [
        ToolCall(name="get_weather", arguments={"city": "Paris"}, id="c1", index=0),
        ToolCall(name="get_time", arguments={"zone": "CET"}, id="c2", index=1),
    ]
    assert (result.finish_reason, result.usage) == ("tool_calls", USAGE)


def test_stream_and_whole_reply_agree() -> None:
    message = {"role": "assistant", "content": "4", "reasoning_content": "2+2",
               "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}]}  # fmt: skip
    whole, streamed = ResultBuilder(), ResultBuilder()
    for event in parse_upstream_response(reply(message, "tool_calls")):
        whole.add(event)
    lines = sse(delta(reasoning_content="2+"), delta(reasoning_content="2"), delta(content="4"),
                call_delta(0, '{"a"', "c1", "f"), call_delta(0, ":1}"), delta("tool_calls"), USAGE_CHUNK, "[DONE]")  # fmt: skip
    for event in decode_stream(lines):
        streamed.add(event)
    assert streamed.result() == whole.result()


# -- upstream error responses ------------------------------------------------------------

ERROR_CASES: list[tuple[str, int, bytes, type[DragomanError], str, str | None]] = [
    ("openai shape", 400, b'{"error":{"message":"bad temperature","type":"invalid_request_error","param":"temperature",'
                          b'"code":null}}', RequestError, "bad temperature", "temperature"),
    ("ollama shape", 404, b'{"error":"model \\"x\\" not found, try pulling it first"}', UpstreamError,
     'model "x" not found, try pulling it first', None),
    ("plain text", 502, b"Bad Gateway\n", UpstreamError, "Bad Gateway", None),
    ("empty body", 500, b"", UpstreamError, "upstream answered HTTP 500", None),
    ("overloaded", 503, b'{"error":{"message":"busy"}}', Overloaded, "busy", None),
]  # fmt: skip


@pytest.mark.parametrize(("name", "status", "raw", "cls", "message", "param"), ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_parse_upstream_error(
    name: str, status: int, raw: bytes, cls: type[DragomanError], message: str, param: str | None
) -> None:
    err = parse_upstream_error(status, raw)
    assert type(err) is cls
    assert (err.status, err.message, err.param) == (status, message, param)
