"""Canonical requests → an Anthropic upstream's body; its replies → canonical events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from dragoman.adapters.aggregate import ResultBuilder
from dragoman.adapters.anthropic.ids import thinking_signature
from dragoman.adapters.anthropic.upstream_reply import UpstreamStreamDecoder, parse_upstream_error, parse_upstream_response
from dragoman.adapters.anthropic.upstream_request import to_upstream
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
    Tool,
    ToolCall,
    ToolCallFragment,
    ToolChoice,
    Usage,
)
from dragoman.adapters.errors import Overloaded, RequestError

TRANSCRIPTS = Path(__file__).resolve().parents[1] / "upstream" / "transcripts" / "anthropic"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(8)
TOOL = Tool(name="f", description="d", parameters={"type": "object"})


def body(**fields: Any) -> dict[str, Any]:
    request = ChatRequest(model="client-name", messages=fields.pop("messages", [Message(role="user", parts=[TextPart("hi")])]), **fields)
    encoded, _ = to_upstream(request, "claude-x", default_max_tokens=4096)
    return json.loads(encoded)


CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("defaults", {}, {"model": "claude-x", "max_tokens": 4096, "stream": False,
                      "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}),
    ("sampling and stops", {"options": SamplingOptions(temperature=0.2, top_p=0.9, top_k=5, num_predict=77, stop=["X"])},
     {"temperature": 0.2, "top_p": 0.9, "top_k": 5, "max_tokens": 77, "stop_sequences": ["X"]}),
    ("tools, auto", {"tools": [TOOL]}, {"tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}]}),
    ("required is any", {"tools": [TOOL], "tool_choice": ToolChoice(mode="required")}, {"tool_choice": {"type": "any"}}),
    ("function is tool", {"tools": [TOOL], "tool_choice": ToolChoice(mode="function", name="f")}, {"tool_choice": {"type": "tool", "name": "f"}}),
    ("none", {"tools": [TOOL], "tool_choice": ToolChoice(mode="none")}, {"tool_choice": {"type": "none"}}),
    ("parallel off", {"tools": [TOOL], "parallel_tool_calls": False}, {"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}),
    ("thinking by depth", {"think": True, "think_level": "high", "options": SamplingOptions(num_predict=30000)},
     {"thinking": {"type": "enabled", "budget_tokens": 24576}}),
    ("a budget stays under max_tokens", {"think": True, "options": SamplingOptions(num_predict=4000)},
     {"thinking": {"type": "enabled", "budget_tokens": 3999}}),
    ("thinking off", {"think": False}, {"thinking": {"type": "disabled"}}),
    ("structured output", {"response_format": ResponseFormat(type="json_schema", schema={"type": "object"})},
     {"output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}}),
    ("stream", {"stream": True}, {"stream": True}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "fields", "want"), CASES, ids=[c[0] for c in CASES])
def test_request_body(name: str, fields: dict[str, Any], want: dict[str, Any]) -> None:
    got = body(**fields)
    assert {key: got.get(key) for key in want} == want


def test_thinking_below_anthropics_minimum_is_left_off() -> None:
    assert "thinking" not in body(think=True, options=SamplingOptions(num_predict=500))


def test_dropped_options_are_named() -> None:
    request = ChatRequest(model="m", messages=[], options=SamplingOptions(seed=1, repeat_penalty=1.1, temperature=0.5))
    assert to_upstream(request, "m", default_max_tokens=10)[1] == ["repeat_penalty", "seed"]


def test_conversation_turns() -> None:
    """System apart (later ones joined), results inside the next user turn, turns merged
    to alternate, images as base64, empty text left out, ids filled in and paired."""
    messages = [
        Message(role="system", parts=[TextPart("S1")]),
        Message(role="user", parts=[TextPart("look"), ImagePart(PNG, "image/png")]),
        Message(role="assistant", parts=[TextPart("")], tool_calls=[ToolCall(name="f", arguments={"a": 1}), ToolCall(name="g")]),
        Message(role="tool", parts=[TextPart("r-g")], tool_name="g"),
        Message(role="tool", parts=[TextPart("r-f")], tool_name="f"),
        Message(role="user", parts=[TextPart("and?")]),
        Message(role="system", parts=[TextPart("S2")]),
    ]
    got = body(messages=messages)
    assert got["system"] == "S1\n\nS2"
    user, assistant, results = got["messages"]
    assert user["content"][1] == {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgoAAAAAAAAAAA=="}}
    calls = assistant["content"]
    assert [(b["type"], b["name"]) for b in calls] == [("tool_use", "f"), ("tool_use", "g")]
    assert all(b["id"].startswith("toolu_") for b in calls)
    assert [(b.get("tool_use_id"), b["type"]) for b in results["content"]] == [
        (calls[1]["id"], "tool_result"), (calls[0]["id"], "tool_result"), (None, "text"),
    ]  # fmt: skip


@pytest.mark.parametrize(("signature", "sent"), [("sig-from-anthropic", True), (None, False), (thinking_signature("t"), False)])
def test_thinking_goes_back_only_with_anthropics_signature(signature: str | None, sent: bool) -> None:
    messages = [Message(role="user", parts=[TextPart("q")]),
                Message(role="assistant", parts=[TextPart("a")], thinking="t", thinking_signature=signature)]  # fmt: skip
    blocks = body(messages=messages)["messages"][1]["content"]
    assert (blocks[0]["type"] == "thinking") is sent
    if sent:
        assert blocks[0] == {"type": "thinking", "thinking": "t", "signature": signature}


def test_count_body_is_the_prompt_only() -> None:
    request = ChatRequest(model="m", messages=[Message(role="user", parts=[TextPart("hi")])], options=SamplingOptions(num_predict=9), stream=True)
    encoded, _ = to_upstream(request, "claude-x", default_max_tokens=10, count=True)
    assert json.loads(encoded) == {"model": "claude-x", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}


# -- replies ---------------------------------------------------------------------------


def decode_stream(name: str) -> list[Event]:
    decoder = UpstreamStreamDecoder()
    events = [e for line in (TRANSCRIPTS / name).read_bytes().split(b"\n") for e in decoder.feed(line)]
    return events + decoder.finish()


def test_stream_of_thinking_text_and_tool_use() -> None:
    events = decode_stream("claude_thinking_tool_use.sse")
    assert events[0] == RoleStart(prompt_tokens=412, cached_tokens=0, cache_write_tokens=0)  # message_start's count, known before the reply
    signature = next(e.signature for e in events if isinstance(e, ThinkingDelta) and e.signature)
    assert signature.startswith("EqQB")
    fragments = [e for e in events if isinstance(e, ToolCallFragment)]
    assert (fragments[0].index, fragments[0].id, fragments[0].name) == (2, "toolu_01A09q90qw90lq917835lq9", "get_weather")
    assert events[-1] == Finish(reason="tool_calls", usage=Usage(prompt_tokens=412, completion_tokens=96, cached_tokens=0, cache_write_tokens=0))
    builder = ResultBuilder()
    for event in events:
        builder.add(event)
    result = builder.result()
    assert result.thinking == "The user wants weather and time for Paris: two tools."
    assert result.thinking_signature == signature and result.content == "Let me check both."
    assert [(c.name, c.arguments) for c in result.tool_calls] == [
        ("get_weather", {"city": "Paris", "unit": "celsius"}), ("get_time", {"tz": "Europe/Paris"}),
    ]  # fmt: skip
    whole = parse_upstream_response((TRANSCRIPTS / "claude_thinking_tool_use.json").read_bytes())
    rebuilt = ResultBuilder()
    for event in whole:
        rebuilt.add(event)
    assert msgspec.structs.replace(rebuilt.result(), tool_calls=[]) == msgspec.structs.replace(result, tool_calls=[])
    assert [(c.name, c.arguments, c.id) for c in rebuilt.result().tool_calls] == [(c.name, c.arguments, c.id) for c in result.tool_calls]


@pytest.mark.parametrize(("name", "finish"), [
    ("claude_text.sse", Finish(usage=Usage(25, 9, 0, 0))),
    ("claude_stop_sequence.sse", Finish(usage=Usage(25, 6, 0, 0), stop_sequence="4")),
    ("claude_max_tokens.sse", Finish(reason="length", usage=Usage(25, 3, 0, 0))),
])  # fmt: skip
def test_stream_endings(name: str, finish: Finish) -> None:
    assert decode_stream(name)[-1] == finish


def test_error_mid_stream_and_a_cut_stream() -> None:
    events = decode_stream("claude_midstream_overloaded.sse")
    assert events[-2:] == [ContentDelta("Partial"), ErrorEvent("upstream error: Overloaded", status=503)]
    decoder = UpstreamStreamDecoder()
    decoder.feed(b'data: {"type":"message_start","message":{"usage":{"input_tokens":3}}}')
    assert decoder.finish() == [ErrorEvent("upstream stream ended before message_stop", status=502)]
    assert UpstreamStreamDecoder().feed(b"data: {nope")[0].status == 502


def test_error_bodies() -> None:
    overloaded = parse_upstream_error(529, (TRANSCRIPTS / "error_overloaded.json").read_bytes())
    assert isinstance(overloaded, Overloaded) and overloaded.status == 503 and overloaded.message == "Overloaded"
    invalid = parse_upstream_error(400, (TRANSCRIPTS / "error_invalid.json").read_bytes())
    assert isinstance(invalid, RequestError) and invalid.message == "temperature: range: 0..1"
    assert parse_upstream_error(500, b"oops").message == "oops"
