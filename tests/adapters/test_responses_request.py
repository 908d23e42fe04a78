"""OpenAI Responses requests → canonical requests (docs/fidelity.md, Responses rows)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from dragoman.adapters.canonical import ChatRequest, ImagePart, Message, ResponseFormat, TextPart, ToolCall, ToolChoice
from dragoman.adapters.errors import RequestError, UnsupportedFeature
from dragoman.adapters.responses import builtin_tools, decode_items, output_items, stored_item, to_canonical, wire
from dragoman.adapters.responses.ids import decode_reasoning, encode_reasoning

PNG = b"\x89PNG\r\n\x1a\n" + bytes(24)
PNG_URI = "data:image/png;base64," + base64.b64encode(PNG).decode()
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
WEB = {"type": "web_search", "external_web_access": False}
NAMESPACE = {"type": "namespace", "name": "multi_agent_v1", "tools": [{"type": "function", "name": "spawn", "parameters": {}}]}
FIXTURES = Path(__file__).resolve().parent / "responses_fixtures"


def decode(body: dict[str, Any]) -> wire.ResponsesRequest:
    return msgspec.json.decode(msgspec.json.encode(body), type=wire.ResponsesRequest)


def convert(**fields: Any) -> ChatRequest:
    return to_canonical(decode({"model": "m", "input": "hi"} | fields))


CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("string input", {}, {"messages": [Message(role="user", parts=[TextPart("hi")])]}),
    ("instructions first", {"instructions": "Be brief."},
     {"messages": [Message(role="system", parts=[TextPart("Be brief.")]), Message(role="user", parts=[TextPart("hi")])]}),
    ("developer is system, a message without type", {"input": [{"role": "developer", "content": "D"}, {"role": "user", "content": [{"type": "input_text", "text": "U"}]}]},
     {"messages": [Message(role="system", parts=[TextPart("D")]), Message(role="user", parts=[TextPart("U")])]}),
    ("sampling", {"temperature": 0.3, "top_p": 0.8, "max_output_tokens": 50},
     {"temperature": 0.3, "top_p": 0.8, "num_predict": 50}),
    ("json_schema", {"text": {"format": {"type": "json_schema", "name": "p", "schema": {"type": "object"}, "strict": True}}},
     {"response_format": ResponseFormat(type="json_schema", schema={"type": "object"}, name="p", strict=True)}),
    ("json_object", {"text": {"format": {"type": "json_object"}}}, {"response_format": ResponseFormat(type="json")}),
    ("reasoning effort", {"reasoning": {"effort": "minimal"}}, {"think": True, "think_level": "low"}),
    ("reasoning none", {"reasoning": {"effort": "none"}}, {"think": False}),
    ("summary only leaves thinking to the model", {"reasoning": {"summary": "auto"}}, {"think": None}),
    ("tool_choice required", {"tools": [WEATHER], "tool_choice": "required"}, {"tool_choice": ToolChoice(mode="required")}),
    ("tool_choice function", {"tools": [WEATHER], "tool_choice": {"type": "function", "name": "get_weather"}},
     {"tool_choice": ToolChoice(mode="function", name="get_weather")}),
    ("parallel calls off", {"tools": [WEATHER], "parallel_tool_calls": False}, {"parallel_tool_calls": False}),
    ("max_tool_calls 1 is one call", {"tools": [WEATHER], "max_tool_calls": 1}, {"parallel_tool_calls": False}),
    ("Codex's extras accepted", {"store": False, "include": ["reasoning.encrypted_content"], "prompt_cache_key": "k",
                                 "client_metadata": {"a": 1}, "truncation": "auto", "service_tier": "auto"}, {"stream": False}),
]  # fmt: skip


def _field(request: ChatRequest, name: str) -> Any:
    if name in ("temperature", "top_p", "num_predict"):
        return getattr(request.options, name)
    return getattr(request, name)


@pytest.mark.parametrize(("name", "fields", "want"), CASES, ids=[c[0] for c in CASES])
def test_request(name: str, fields: dict[str, Any], want: dict[str, Any]) -> None:
    request = convert(**fields)
    assert {key: _field(request, key) for key in want} == want


def test_builtin_tools_are_not_offered_and_are_named() -> None:
    body = decode({"model": "m", "input": "hi", "tools": [WEATHER, WEB, NAMESPACE]})
    assert [t.name for t in to_canonical(body).tools] == ["get_weather"]
    assert builtin_tools(body) == ["web_search", "multi_agent_v1"]


def test_allowed_tools_narrows_the_tools() -> None:
    other = dict(WEATHER, name="get_time")
    choice = {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_time"}]}
    request = convert(tools=[WEATHER, other], tool_choice=choice)
    assert [t.name for t in request.tools] == ["get_time"] and request.tool_choice == ToolChoice(mode="required")


def test_a_turn_folds_into_one_assistant_message() -> None:
    """reasoning + message + two calls, their outputs, then the user: as Chat Completions
    spells it; each output knows its function's name."""
    items = [
        {"type": "message", "role": "user", "content": "weather?"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Need tools."}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": ""},
        {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "noon"}]},
        {"type": "message", "role": "user", "content": "thanks"},
    ]
    got = convert(input=items).messages
    assert got == [
        Message(role="user", parts=[TextPart("weather?")]),
        Message(role="assistant", parts=[TextPart("Checking.")], thinking="Need tools.", tool_calls=[
            ToolCall(name="get_weather", arguments={"city": "Paris"}, id="call_1", index=0),
            ToolCall(name="get_time", arguments={}, id="call_2", index=1),
        ]),
        Message(role="tool", parts=[TextPart("Sunny")], tool_call_id="call_1", tool_name="get_weather"),
        Message(role="tool", parts=[TextPart("noon")], tool_call_id="call_2", tool_name="get_time"),
        Message(role="user", parts=[TextPart("thanks")]),
    ]  # fmt: skip


@pytest.mark.parametrize(("item", "thinking"), [
    ({"type": "reasoning", "summary": [{"type": "summary_text", "text": "sum"}]}, "sum"),
    ({"type": "reasoning", "summary": [], "encrypted_content": encode_reasoning("ours é")}, "ours é"),
    ({"type": "reasoning", "summary": [], "encrypted_content": "gAAAAB-openai-only"}, None),
])  # fmt: skip
def test_reasoning_items(item: dict[str, Any], thinking: str | None) -> None:
    messages = convert(input=[{"role": "user", "content": "q"}, item, {"role": "assistant", "content": "a"}]).messages
    assert messages[1].thinking == thinking


def test_encrypted_reasoning_round_trip() -> None:
    assert decode_reasoning(encode_reasoning("x\ny")) == "x\ny"
    assert decode_reasoning("dragoman1:!!notbase64") is None and decode_reasoning(None) is None


def test_images_as_data_uris_and_fetched_urls() -> None:
    content = [{"type": "input_image", "image_url": PNG_URI}, {"type": "input_image", "image_url": "https://e.com/a.png"},
               {"type": "input_text", "text": "what?"}]  # fmt: skip
    body = decode({"model": "m", "input": [{"role": "user", "content": content}]})
    parts = to_canonical(body, fetched={"https://e.com/a.png": PNG_URI}).messages[0].parts
    assert parts == [ImagePart(PNG, "image/png"), ImagePart(PNG, "image/png"), TextPart("what?")]


def test_history_comes_first_and_instructions_are_not_carried_over() -> None:
    history = [stored_item(wire.InputItem(type="message", role="user", content="first"))]
    history.append({"type": "message", "id": "msg_a", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": "one", "annotations": []}]})  # fmt: skip
    request = to_canonical(decode({"model": "m", "input": "second", "instructions": "new"}), decode_items(msgspec.json.encode(history)))
    assert [(m.role, m.text) for m in request.messages] == [
        ("system", "new"), ("user", "first"), ("assistant", "one"), ("user", "second"),
    ]  # fmt: skip


def test_stored_items_are_complete() -> None:
    user = stored_item(wire.InputItem(role="user", content="hi"))
    assert user["type"] == "message" and user["id"].startswith("msg_") and user["status"] == "completed"
    assert user["content"] == [{"type": "input_text", "text": "hi"}]
    call = stored_item(wire.InputItem(type="function_call_output", call_id="c", output="x", id="given"))
    assert call == {"type": "function_call_output", "id": "given", "call_id": "c", "output": "x", "status": "completed"}
    response = wire.Response(id="r", created_at=0, status="completed", model="m",
                             output=[wire.FunctionCallItem(id="fc_1", status="completed", call_id="c", name="f", arguments="{}")])  # fmt: skip
    assert output_items(response) == [
        {"type": "function_call", "id": "fc_1", "status": "completed", "call_id": "c", "name": "f", "arguments": "{}"}
    ]


REFUSALS: list[tuple[str, dict[str, Any], type[Exception], str]] = [
    ("forcing a built-in tool", {"tools": [WEB], "tool_choice": {"type": "web_search"}}, UnsupportedFeature, "tool_choice"),
    ("forcing a custom tool", {"tool_choice": {"type": "custom", "name": "apply_patch"}}, UnsupportedFeature, "tool_choice"),
    ("tool_choice names no tool", {"tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}}, RequestError, "tool_choice.name"),
    ("required without function tools", {"tools": [WEB], "tool_choice": "required"}, RequestError, "tool_choice"),
    ("bad tool_choice string", {"tool_choice": "sometimes"}, RequestError, "tool_choice"),
    ("function tool without a name", {"tools": [{"type": "function"}]}, RequestError, "tools[0].name"),
    ("stored prompt", {"prompt": {"id": "pmpt_1"}}, UnsupportedFeature, "prompt"),
    ("logprobs", {"include": ["message.output_text.logprobs"]}, UnsupportedFeature, "include[0]"),
    ("unknown include", {"include": ["everything"]}, RequestError, "include[0]"),
    ("reasoning effort", {"reasoning": {"effort": "extreme"}}, RequestError, "reasoning.effort"),
    ("json_schema without schema", {"text": {"format": {"type": "json_schema", "name": "x"}}}, RequestError, "text.format.schema"),
    ("unknown item", {"input": [{"type": "item_reference", "id": "msg_1"}]}, UnsupportedFeature, "input[0].type"),
    ("item without type or role", {"input": [{"content": "x"}]}, RequestError, "input[0].type"),
    ("bad role", {"input": [{"role": "tool", "content": "x"}]}, RequestError, "input[0].role"),
    ("input_file", {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, UnsupportedFeature, "input[0].content[0].type"),
    ("uploaded image", {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]}, UnsupportedFeature, "input[0].content[0].file_id"),
    ("remote image not fetched", {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://e.com/a.png"}]}]},
     RequestError, "input[0].content[0].image_url"),
    ("call arguments not JSON", {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{nope"}]},
     RequestError, "input[0].arguments"),
    ("call without call_id", {"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, RequestError, "input[0].call_id"),
    ("output without output", {"input": [{"type": "function_call_output", "call_id": "c"}]}, RequestError, "input[0].output"),
    # Echoed back and stored, never seen by the model: bounded (OpenAI's metadata bounds).
    ("17 metadata pairs", {"metadata": {f"k{i}": "v" for i in range(17)}}, RequestError, "metadata"),
    ("a long metadata key", {"metadata": {"k" * 65: "v"}}, RequestError, "metadata"),
    ("a long metadata value", {"metadata": {"k": "v" * 513}}, RequestError, "metadata.k"),
    ("built-in tools of 300 KB", {"tools": [{"type": "web_search", "filters": {"allowed_domains": ["x" * 1000] * 300}}]},
     RequestError, "tools"),
    ("a long prompt_cache_key", {"prompt_cache_key": "k" * 513}, RequestError, "prompt_cache_key"),
    ("a long user", {"user": "u" * 513}, RequestError, "user"),
]  # fmt: skip


def test_echoed_fields_at_their_bounds_pass() -> None:
    convert(metadata={f"{i:064d}": "v" * 512 for i in range(16)}, prompt_cache_key="k" * 512, user="u" * 512)


@pytest.mark.parametrize(("name", "fields", "error", "param"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusals_name_the_field(name: str, fields: dict[str, Any], error: type[Exception], param: str) -> None:
    with pytest.raises(error) as info:
        convert(**fields)
    assert info.value.param == param and param in info.value.message


@pytest.mark.parametrize("name", ["codex_default.json", "codex_trimmed.json"])
def test_codex_requests_convert(name: str) -> None:
    """Recorded Codex 0.171.0 requests: nothing refused, built-ins left out."""
    body = json.loads((FIXTURES / name).read_text())
    request = to_canonical(decode(body))
    functions = [t["name"] for t in body["tools"] if t["type"] == "function"]
    assert [t.name for t in request.tools] == functions and request.stream and request.think is None
    assert request.messages[-1] == Message(role="user", parts=[TextPart("Say hi")])
