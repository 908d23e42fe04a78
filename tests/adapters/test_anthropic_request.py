"""Anthropic Messages requests → canonical requests (docs/fidelity.md, Anthropic rows)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from dragoman.adapters.anthropic import count_request, remote_image_urls, think_level_for_budget, to_canonical, wire
from dragoman.adapters.canonical import ChatRequest, ImagePart, Message, ResponseFormat, TextPart, Tool, ToolCall, ToolChoice
from dragoman.adapters.errors import RequestError, UnsupportedFeature

PNG = b"\x89PNG\r\n\x1a\n" + bytes(24)
PNG_B64 = base64.b64encode(PNG).decode()
HI = [{"role": "user", "content": "hi"}]
WEATHER = {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
FIXTURES = Path(__file__).resolve().parent / "anthropic_fixtures"


def decode(body: dict[str, Any], kind: type[msgspec.Struct] = wire.MessagesRequest) -> Any:
    """As Litestar does it: JSON bytes into the wire struct."""
    return msgspec.json.decode(msgspec.json.encode(body), type=kind)


def convert(**fields: Any) -> ChatRequest:
    return to_canonical(decode({"model": "m", "max_tokens": 64, "messages": HI} | fields))


# -- whole requests ----------------------------------------------------------------------

CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("plain", {}, {"messages": [Message(role="user", parts=[TextPart("hi")])], "num_predict": 64}),
    ("system string", {"system": "Be brief."},
     {"messages": [Message(role="system", parts=[TextPart("Be brief.")]), Message(role="user", parts=[TextPart("hi")])]}),
    ("system blocks joined, cache_control ignored",
     {"system": [{"type": "text", "text": "A", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "B"}]},
     {"messages": [Message(role="system", parts=[TextPart("A\n\nB")]), Message(role="user", parts=[TextPart("hi")])]}),
    ("sampling and stops", {"temperature": 0.5, "top_p": 0.9, "top_k": 40, "stop_sequences": ["END", ""]},
     {"temperature": 0.5, "top_p": 0.9, "top_k": 40, "stop": ["END"]}),
    ("thinking enabled: budget → level", {"max_tokens": 20000, "thinking": {"type": "enabled", "budget_tokens": 8000}},
     {"think": True, "think_level": "medium"}),
    ("thinking disabled", {"thinking": {"type": "disabled"}}, {"think": False, "think_level": None}),
    ("adaptive thinking leaves it to the model; effort sets the depth",
     {"thinking": {"type": "adaptive"}, "output_config": {"effort": "max"}}, {"think": None, "think_level": "high"}),
    ("tool_choice any → required", {"tools": [WEATHER], "tool_choice": {"type": "any"}},
     {"tool_choice": ToolChoice(mode="required"), "parallel_tool_calls": None}),
    ("tool_choice tool → function", {"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "get_weather"}},
     {"tool_choice": ToolChoice(mode="function", name="get_weather")}),
    ("tool_choice none", {"tools": [WEATHER], "tool_choice": {"type": "none"}}, {"tool_choice": ToolChoice(mode="none")}),
    ("disable_parallel_tool_use", {"tools": [WEATHER], "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}},
     {"tool_choice": ToolChoice(), "parallel_tool_calls": False}),
    ("output_config.format json_schema", {"output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}}},
     {"response_format": ResponseFormat(type="json_schema", schema={"type": "object"})}),
    ("metadata, an empty context_management, service_tier, top-level cache_control accepted",
     {"metadata": {"user_id": "u"}, "context_management": {"edits": []}, "service_tier": "auto",
      "cache_control": {"type": "ephemeral"}}, {"num_predict": 64}),
    ("a tool-search tool: every deferred tool offered up front",
     {"tools": [{"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}, {**WEATHER, "defer_loading": True}]},
     {"tools": [Tool(name="get_weather", description="Weather", parameters=WEATHER["input_schema"])]}),
    ("stream", {"stream": True}, {"stream": True}),
]  # fmt: skip


def _field(request: ChatRequest, name: str) -> Any:
    if name in ("temperature", "top_p", "top_k", "stop", "num_predict"):
        return getattr(request.options, name)
    return getattr(request, name)


@pytest.mark.parametrize(("name", "fields", "want"), CASES, ids=[c[0] for c in CASES])
def test_request(name: str, fields: dict[str, Any], want: dict[str, Any]) -> None:
    request = convert(**fields)
    assert {key: _field(request, key) for key in want} == want


def test_tools_keep_their_schema() -> None:
    request = convert(tools=[WEATHER])
    assert [(t.name, t.description, t.parameters) for t in request.tools] == [
        ("get_weather", "Weather", WEATHER["input_schema"])
    ]


# -- messages ----------------------------------------------------------------------------


def test_a_tool_round_trip() -> None:
    """Assistant thinking + text + tool_use, then the results (string, blocks, error)
    and the user's next words: tool messages first, in the order written."""
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Need a tool.", "signature": "sig-1"},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "boom"}], "is_error": True},
            {"type": "text", "text": "thanks"},
        ]},
    ]  # fmt: skip
    got = convert(messages=messages).messages
    assert got[1] == Message(
        role="assistant",
        parts=[TextPart("Checking.")],
        thinking="Need a tool.",
        thinking_signature="sig-1",
        tool_calls=[
            ToolCall(name="get_weather", arguments={"city": "Paris"}, id="toolu_1", index=0),
            ToolCall(name="get_time", arguments={}, id="toolu_2", index=1),
        ],
    )
    assert got[2:] == [
        Message(role="tool", parts=[TextPart("Sunny")], tool_call_id="toolu_1", tool_name="get_weather"),
        Message(role="tool", parts=[TextPart("Error: "), TextPart("boom")], tool_call_id="toolu_2", tool_name="get_time"),
        Message(role="user", parts=[TextPart("thanks")]),
    ]


def test_redacted_thinking_is_accepted_and_unreadable() -> None:
    messages = [*HI, {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "opaque"}, {"type": "text", "text": "ok"}]}]
    assert convert(messages=messages).messages[1] == Message(role="assistant", parts=[TextPart("ok")])


def test_mid_conversation_system_message() -> None:
    """Claude Code 2.1 sends ``role: system`` between turns (a beta of the API)."""
    messages = [*HI, {"role": "system", "content": "Agents available: none."}]
    assert convert(messages=messages).messages[1] == Message(role="system", parts=[TextPart("Agents available: none.")])


def test_images_base64_and_fetched_url() -> None:
    content = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        {"type": "text", "text": "what?"},
    ]
    body = decode({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": content}]})
    assert remote_image_urls(body.messages) == ["https://example.com/a.png"]
    fetched = {"https://example.com/a.png": "data:image/png;base64," + PNG_B64}
    parts = to_canonical(body, fetched).messages[0].parts
    assert parts == [ImagePart(PNG, "image/png"), ImagePart(PNG, "image/png"), TextPart("what?")]


def test_count_request_carries_the_prompt() -> None:
    body = decode({"model": "m", "system": "S", "messages": HI, "tools": [WEATHER]}, wire.CountTokensRequest)
    request = count_request(body)
    assert [m.role for m in request.messages] == ["system", "user"] and request.tools[0].name == "get_weather"


@pytest.mark.parametrize(("budget", "level"), [(1024, "low"), (4095, "low"), (4096, "medium"), (16383, "medium"), (16384, "high")])
def test_budget_levels(budget: int, level: str) -> None:
    assert think_level_for_budget(budget) == level


# -- refusals: a 400 naming the field ----------------------------------------------------

REFUSALS: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("document block", {"messages": [{"role": "user", "content": [{"type": "document", "source": {"type": "base64", "data": "x"}}]}]},
     UnsupportedFeature, "messages[0].content[0].type"),
    ("unknown block", {"messages": [{"role": "user", "content": [{"type": "search_result"}]}]},
     UnsupportedFeature, "messages[0].content[0].type"),
    ("url image without fetching", {"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]}]},
     RequestError, "messages[0].content[0].source.url"),
    ("bad base64", {"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": "!!"}}]}]},
     RequestError, "messages[0].content[0].source.data"),
    ("server tool", {"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, UnsupportedFeature, "tools[0].type"),
    ("tool without schema", {"tools": [{"name": "t"}]}, RequestError, "tools[0].input_schema"),
    ("tool_choice names no tool", {"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}}, RequestError, "tool_choice.name"),
    ("tool_choice any without tools", {"tool_choice": {"type": "any"}}, RequestError, "tool_choice"),
    ("thinking budget too small", {"thinking": {"type": "enabled", "budget_tokens": 100}}, RequestError, "thinking.budget_tokens"),
    ("thinking budget not below max_tokens", {"max_tokens": 2000, "thinking": {"type": "enabled", "budget_tokens": 2000}},
     RequestError, "thinking.budget_tokens"),
    ("thinking budget missing", {"thinking": {"type": "enabled"}}, RequestError, "thinking.budget_tokens"),
    ("tool_use without id", {"messages": [*HI, {"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}]},
     RequestError, "messages[1].content[0].id"),
    ("tool_result without tool_use_id", {"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]},
     RequestError, "messages[0].content[0].tool_use_id"),
    ("image in an assistant turn", {"messages": [*HI, {"role": "assistant", "content": [{"type": "image", "source": {"type": "base64", "data": PNG_B64}}]}]},
     UnsupportedFeature, "messages[1].content[0].type"),
    ("mcp servers", {"mcp_servers": [{"type": "url", "url": "https://x"}]}, UnsupportedFeature, "mcp_servers"),
    ("no messages", {"messages": []}, RequestError, "messages"),
    ("two tools of one name", {"tools": [WEATHER, WEATHER]}, RequestError, "tools[1].name"),
    ("json_schema format without schema", {"output_config": {"format": {"type": "json_schema"}}}, RequestError,
     "output_config.format.schema"),
    ("tool_choice forcing the tool search",
     {"tools": [{"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}, WEATHER],
      "tool_choice": {"type": "tool", "name": "tool_search_tool_bm25"}}, UnsupportedFeature, "tool_choice.name"),
    ("a context edit dragoman does not apply", {"context_management": {"edits": [{"type": "compact_20260112"}]}},
     UnsupportedFeature, "context_management.edits[0].type"),
    ("a keep of the wrong kind", {"context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": {"type": "tool_uses", "value": 1}}]}},
     RequestError, "context_management.edits[0].keep"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "fields", "error", "param"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusals_name_the_field(name: str, fields: dict[str, Any], error: type[Exception], param: str) -> None:
    with pytest.raises(error) as info:
        convert(**fields)
    assert info.value.param == param and param in info.value.message


@pytest.mark.parametrize(("body", "field"), [
    ({"model": "m", "messages": HI}, "max_tokens"),
    ({"model": "m", "max_tokens": 0, "messages": HI}, "max_tokens"),
    ({"model": "m", "max_tokens": 8, "messages": HI, "temperature": 1.5}, "temperature"),
    ({"model": "m", "max_tokens": 8, "messages": [{"role": "tool", "content": "x"}]}, "role"),
])  # fmt: skip
def test_types_are_checked_on_decoding(body: dict[str, Any], field: str) -> None:
    with pytest.raises(msgspec.ValidationError, match=field):
        decode(body)


# -- what Claude Code sends ----------------------------------------------------------------


def test_claude_code_request_converts() -> None:
    """A recorded Claude Code 2.1.197 request (``--bare --system-prompt … --tools ''``)
    and its default one (24 tools, a mid-conversation system message): every field
    is read or ignored, none refused; max_tokens stays as asked (clamped later)."""
    for name in ("claude_code_bare.json", "claude_code_default.json"):
        body = json.loads((FIXTURES / name).read_text())
        request = to_canonical(decode(body))
        assert request.options.num_predict == 32000 and request.think is None and request.think_level == "high"
        assert request.messages[-1].role in ("user", "system") and request.stream
        assert len(request.tools) == len(body["tools"])
