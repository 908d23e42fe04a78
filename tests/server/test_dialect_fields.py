"""A bound breached in Anthropic Messages or OpenAI Responses names the field as that
client wrote it — not the canonical chat path (``messages[1].tool_calls[0].function
.arguments``), whose indexes are not the client's: a top-level ``system`` or
``instructions`` becomes a message, tool results and calls become messages of their own.
Over real HTTP against the scripted backend."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.support.server import RunningServer


def nested(levels: int) -> Any:
    value: Any = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def post(server: RunningServer, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=30)


def test_anthropic_tool_use_input_nested_past_the_limit(scripted_server: RunningServer) -> None:
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": nested(65)}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]},
    ]
    r = post(scripted_server, "/v1/messages", {"model": "scripted", "max_tokens": 8, "system": "be brief", "messages": messages})
    assert r.status_code == 400
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"] == (
        "messages (tool_use block id 'toolu_1').input: JSON nested more than 64 levels deep (server.limits.max_json_depth)"
    )


def test_responses_function_call_arguments_nested_past_the_limit(scripted_server: RunningServer) -> None:
    items = [
        {"role": "user", "content": "weather?"},
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": json.dumps(nested(65))},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    ]
    r = post(scripted_server, "/v1/responses", {"model": "scripted", "instructions": "be brief", "input": items})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == "input"
    assert error["message"] == (
        "input (function_call id 'call_1').arguments: JSON nested more than 64 levels deep (server.limits.max_json_depth)"
    )


def test_anthropic_message_too_long_is_not_named_by_a_shifted_index(scripted_server: RunningServer) -> None:
    body = {"model": "scripted", "max_tokens": 8, "system": "be brief", "messages": [{"role": "user", "content": "x" * 2_000_001}]}
    message = post(scripted_server, "/v1/messages", body).json()["error"]["message"]
    # The canonical messages[1] is the client's messages[0]: name neither index.
    assert message == "messages (user message): 2000001 characters; the limit is 2000000 (server.limits.max_message_chars)"
    body = {"model": "scripted", "max_tokens": 8, "system": "s" * 2_000_001, "messages": [{"role": "user", "content": "hi"}]}
    assert post(scripted_server, "/v1/messages", body).json()["error"]["message"].startswith("system: 2000001 characters")


@pytest.mark.parametrize(
    ("input_", "message"),
    [
        ([{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}] * 17}],
         "input: 17 images in one request; the limit is 16"),
        ([{"role": "user", "content": "y" * 1_900_000}] * 5,
         "input: 9500000 characters in all; the limit is 8000000 (server.limits.max_prompt_chars)"),
    ],
    ids=["images", "characters"],
)
def test_responses_name_the_conversation_input(scripted_server: RunningServer, input_: Any, message: str) -> None:
    r = post(scripted_server, "/v1/responses", {"model": "scripted", "input": input_})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == "input" and error["message"].startswith(message), error


def test_an_empty_conversation_is_refused_as_the_real_apis_do(scripted_server: RunningServer) -> None:
    """Anthropic and OpenAI chat refuse ``messages: []`` (a model would answer nothing in
    particular, at full cost); Ollama's ``/api/chat`` loads the model instead."""
    import anthropic
    import openai

    claude = anthropic.Anthropic(base_url=scripted_server.url, api_key="x", max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model="scripted", max_tokens=8, messages=[])
    assert refused.value.body["error"]["message"] == "messages: at least one message is required"  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.count_tokens(model="scripted", messages=[])
    gpt = openai.OpenAI(base_url=scripted_server.url + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused_too:
        gpt.chat.completions.create(model="scripted", messages=[])
    assert refused_too.value.body["param"] == "messages"  # type: ignore[index]
    loaded = httpx.post(scripted_server.url + "/api/chat", json={"model": "scripted", "messages": [], "stream": False})
    assert loaded.json()["done_reason"] == "load"


def test_anthropic_tool_names_must_be_unique(scripted_server: RunningServer) -> None:
    tool = {"name": "get_weather", "input_schema": {"type": "object"}}
    body = {"model": "scripted", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], "tools": [tool, tool]}
    r = post(scripted_server, "/v1/messages", body)
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "tools[1].name: tool names must be unique; 'get_weather' is used twice"
