"""Canonical requests → an upstream's ``/v1/responses`` body; its replies → canonical events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dragoman.adapters.aggregate import ResultBuilder
from dragoman.adapters.canonical import (
    ChatRequest,
    ErrorEvent,
    Event,
    Finish,
    Message,
    ResponseFormat,
    SamplingOptions,
    TextPart,
    ThinkingDelta,
    Tool,
    ToolCall,
    ToolChoice,
    Usage,
)
from dragoman.adapters.errors import UnsupportedFeature
from dragoman.adapters.responses.upstream_reply import UpstreamStreamDecoder, parse_upstream_response
from dragoman.adapters.responses.upstream_request import to_upstream

TRANSCRIPTS = Path(__file__).resolve().parents[1] / "upstream" / "transcripts" / "responses"
TOOL = Tool(name="f", description="d", parameters={"type": "object"})
HI = [Message(role="user", parts=[TextPart("hi")])]


def body(**fields: Any) -> dict[str, Any]:
    request = ChatRequest(model="client-name", messages=fields.pop("messages", HI), **fields)
    return json.loads(to_upstream(request, "gpt-x")[0])


CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("stateless defaults", {}, {"model": "gpt-x", "store": False, "stream": False,
                                "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}),
    ("leading system is instructions",
     {"messages": [Message(role="system", parts=[TextPart("S")]), *HI, Message(role="system", parts=[TextPart("later")])]},
     {"instructions": "S", "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                                     {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "later"}]}]}),
    ("sampling", {"options": SamplingOptions(temperature=0.1, top_p=0.5, num_predict=20)},
     {"temperature": 0.1, "top_p": 0.5, "max_output_tokens": 20}),
    ("tools", {"tools": [TOOL], "tool_choice": ToolChoice(mode="function", name="f"), "parallel_tool_calls": False},
     {"tools": [{"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}}],
      "tool_choice": {"type": "function", "name": "f"}, "parallel_tool_calls": False}),
    ("required", {"tools": [TOOL], "tool_choice": ToolChoice(mode="required")}, {"tool_choice": "required"}),
    ("json schema", {"response_format": ResponseFormat(type="json_schema", schema={"type": "object"}, name="p")},
     {"text": {"format": {"type": "json_schema", "name": "p", "schema": {"type": "object"}}}}),
    ("json", {"response_format": ResponseFormat(type="json")}, {"text": {"format": {"type": "json_object"}}}),
    ("effort", {"think": True, "think_level": "high"}, {"reasoning": {"effort": "high"}}),
    ("off", {"think": False}, {"reasoning": {"effort": "none"}}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "fields", "want"), CASES, ids=[c[0] for c in CASES])
def test_request_body(name: str, fields: dict[str, Any], want: dict[str, Any]) -> None:
    got = body(**fields)
    assert {key: got.get(key) for key in want} == want


def test_tool_round_trip_items_with_paired_ids() -> None:
    messages = [*HI, Message(role="assistant", parts=[TextPart("ok")], thinking="hidden", tool_calls=[ToolCall(name="f", arguments={"x": 1})]),
                Message(role="tool", parts=[TextPart("done")], tool_name="f")]  # fmt: skip
    items = body(messages=messages)["input"]
    assert items[1] == {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}
    call, output = items[2], items[3]
    assert (call["type"], call["name"], json.loads(call["arguments"])) == ("function_call", "f", {"x": 1})
    assert output == {"type": "function_call_output", "call_id": call["call_id"], "output": "done"}
    assert "hidden" not in json.dumps(items)  # OpenAI takes back only its own encrypted reasoning


def test_stop_is_refused_and_other_options_named() -> None:
    with pytest.raises(UnsupportedFeature) as info:
        body(options=SamplingOptions(stop=["x"]))
    assert info.value.param == "stop"
    request = ChatRequest(model="m", messages=HI, options=SamplingOptions(seed=3, top_k=4))
    assert to_upstream(request, "m")[1] == ["top_k", "seed"]


def decode_stream(name: str) -> list[Event]:
    decoder = UpstreamStreamDecoder()
    events = [e for line in (TRANSCRIPTS / name).read_bytes().split(b"\n") for e in decoder.feed(line)]
    return events + decoder.finish()


def result_of(events: list[Event]) -> Any:
    builder = ResultBuilder()
    for event in events:
        builder.add(event)
    return builder.result()


def test_stream_and_whole_reply_of_reasoning_and_calls() -> None:
    streamed = result_of(decode_stream("gpt_reasoning_function_calls.sse"))
    whole = result_of(parse_upstream_response((TRANSCRIPTS / "gpt_reasoning_function_calls.json").read_bytes()))
    for result in (streamed, whole):
        assert result.thinking == "**Checking two things**\n\nWeather and time for Paris."
        assert [(c.name, c.arguments, c.id) for c in result.tool_calls] == [
            ("get_weather", {"city": "Paris", "unit": "celsius"}, "call_kX8x0ENQpT0D2kNqQ7jY3Ly9"),
            ("get_time", {"tz": "Europe/Paris"}, "call_Wq1m9a7bC2dE3fG4hI5jK6lM"),
        ]
        assert result.finish_reason == "tool_calls" and result.usage == Usage(118, 187, 0)


@pytest.mark.parametrize(("name", "last"), [
    ("gpt_text.sse", Finish(usage=Usage(21, 9, 0))),
    ("gpt_incomplete.sse", Finish(reason="length", usage=Usage(21, 3, 0))),
    ("gpt_failed.sse", ErrorEvent("upstream error: The server had an error processing your request.", status=502)),
])  # fmt: skip
def test_stream_endings(name: str, last: Event) -> None:
    assert decode_stream(name)[-1] == last


def test_summary_deltas_are_thinking_and_a_cut_stream_is_an_error() -> None:
    events = decode_stream("gpt_reasoning_function_calls.sse")
    assert [e.text for e in events if isinstance(e, ThinkingDelta)] == ["**Checking two things**\n\n", "Weather and time for Paris."]
    decoder = UpstreamStreamDecoder()
    decoder.feed(b'data: {"type":"response.created","sequence_number":0}')
    assert decoder.finish()[-1].status == 502
