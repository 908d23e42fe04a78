"""Which constraint a request gets: JSON schema, a forced tool call, or none."""

from __future__ import annotations

import json

import pytest

from dragoman.adapters.canonical import ChatRequest, Message, ResponseFormat, TextPart, Tool, ToolChoice
from dragoman.adapters.errors import RequestError
from dragoman.backends.onnx.constraint_plan import guidance_for, response_schema, tool_call_grammar

WEATHER = Tool(
    name="get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
)
TIME = Tool(name="get_time", description="Has a } brace", parameters={})


def request(**kwargs: object) -> ChatRequest:
    return ChatRequest(model="m", messages=[Message(role="user", parts=[TextPart("hi")])], **kwargs)  # type: ignore[arg-type]


CASES = [
    ("nothing", request(), True, None),
    ("json mode", request(response_format=ResponseFormat(type="json")), True, ("json_schema", "object")),
    (
        "json schema",
        request(
            response_format=ResponseFormat(
                type="json_schema", schema={"type": "object", "properties": {"a": {"type": "integer"}}}
            )
        ),
        True,
        ("json_schema", "properties"),
    ),
    ("tools on auto: free text", request(tools=[WEATHER]), True, None),
    (
        "required forces a call",
        request(tools=[WEATHER, TIME], tool_choice=ToolChoice(mode="required")),
        True,
        ("lark_grammar", "get_time"),
    ),
    (
        "named function forces that one",
        request(tools=[WEATHER, TIME], tool_choice=ToolChoice(mode="function", name="get_weather")),
        True,
        ("lark_grammar", "get_weather"),
    ),
    (
        "forced call wins over a format",
        request(tools=[WEATHER], tool_choice=ToolChoice(mode="required"), response_format=ResponseFormat(type="json")),
        True,
        ("lark_grammar", "<tool_call>"),
    ),
    (
        "tools inactive: format only",
        request(tools=[WEATHER], tool_choice=ToolChoice(mode="required"), response_format=ResponseFormat(type="json")),
        False,
        ("json_schema", "object"),
    ),
]


@pytest.mark.parametrize(("name", "req", "tools_active", "expected"), CASES, ids=[c[0] for c in CASES])
def test_guidance_for(name: str, req: ChatRequest, tools_active: bool, expected: tuple[str, str] | None) -> None:
    guidance = guidance_for(req, tools_active=tools_active)
    if expected is None:
        assert guidance is None
    else:
        assert guidance is not None and guidance.kind == expected[0] and expected[1] in guidance.data


def test_named_function_grammar_excludes_the_others() -> None:
    guidance = guidance_for(
        request(tools=[WEATHER, TIME], tool_choice=ToolChoice(mode="function", name="get_weather")), tools_active=True
    )
    assert guidance is not None and "get_time" not in guidance.data


def test_unknown_named_function_is_a_request_error() -> None:
    with pytest.raises(RequestError, match="'nope', which is not among the tools \\(get_weather\\)"):
        guidance_for(request(tools=[WEATHER], tool_choice=ToolChoice(mode="function", name="nope")), tools_active=True)


def test_schemas_get_strict_whitespace_without_mutating_the_request() -> None:
    schema = {"type": "object"}
    out = response_schema(ResponseFormat(type="json_schema", schema=schema))
    assert out["x-guidance"] == {"whitespace_flexible": False} and "x-guidance" not in schema
    assert response_schema(ResponseFormat(type="json")) == {
        "type": "object",
        "x-guidance": {"whitespace_flexible": False},
    }


def test_tool_grammar_embeds_each_call_schema_as_json() -> None:
    grammar = tool_call_grammar([WEATHER, TIME])
    lines = grammar.splitlines()
    assert lines[:2] == ['start: "<tool_call>" call "</tool_call>"', "call: call_0 | call_1"]
    schema = json.loads(lines[2].removeprefix("call_0: %json "))
    assert schema["properties"]["name"] == {"const": "get_weather"}
    assert schema["properties"]["arguments"] == {**WEATHER.parameters, "additionalProperties": False}
    assert "additionalProperties" not in WEATHER.parameters  # the request is not mutated
    empty = json.loads(lines[3].removeprefix("call_1: %json "))
    assert empty["properties"]["arguments"] == {"type": "object", "properties": {}, "additionalProperties": False}


def test_tool_grammar_keeps_an_explicit_additional_properties() -> None:
    open_tool = Tool(name="f", parameters={"type": "object", "properties": {}, "additionalProperties": True})
    schema = json.loads(tool_call_grammar([open_tool]).splitlines()[2].removeprefix("call_0: %json "))
    assert schema["properties"]["arguments"]["additionalProperties"] is True
