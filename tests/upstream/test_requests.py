"""What the upstream receives: same-dialect requests pass through with only the model
name rewritten; cross-dialect requests carry every field that has a counterpart, and
options without one are logged and dropped, never remapped to another meaning."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from tests.support.replay import ReplayServer
from tests.support.server import RunningServer, config_from_yaml, serve

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24
PNG_B64 = base64.b64encode(PNG).decode()
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather now", "parameters": SCHEMA}}


@pytest.fixture(scope="module")
def gateway(openai_upstream: ReplayServer, ollama_upstream: ReplayServer) -> Iterator[RunningServer]:
    config = config_from_yaml(
        f"""\
        models:
          - {{name: to-openai, backend: openai, base_url: "{openai_upstream.url}/v1", model: oa-text}}
          - {{name: to-vllm, backend: openai, base_url: "{openai_upstream.url}/v1", model: oa-text, extra_options: true}}
          - {{name: to-ollama, backend: ollama, base_url: "{ollama_upstream.url}", model: ol-thinking}}
        """
    )
    with serve(config) as server:
        yield server


OPENAI_REQUEST: dict[str, Any] = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
        ]},
        {"role": "assistant", "content": None, "tool_calls": [
            # Compact JSON: arguments are parsed (validated) and written back without spaces.
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "-3 C"},
    ],
    "temperature": 0.2, "top_p": 0.9, "max_tokens": 64, "stop": ["END"], "seed": 7,
    "presence_penalty": 0.5, "frequency_penalty": 0.25,
    "tools": [TOOL], "tool_choice": "required",
    "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True}},
    "reasoning_effort": "low",
}

OLLAMA_REQUEST: dict[str, Any] = {
    "messages": [{"role": "user", "content": "Describe it", "images": [PNG_B64]}],
    "options": {"temperature": 0.1, "num_predict": 32, "top_k": 40, "repeat_penalty": 1.1, "stop": ["\n\n"]},
    "format": SCHEMA,
    "think": "high",
    "keep_alive": "10m",
    "tools": [TOOL],
}

CASES = [
    # (name, path, request, entry, what the upstream must receive: key -> value, or None for absent)
    ("openai -> openai: only the model name changes", "/v1/chat/completions", OPENAI_REQUEST, "to-openai",
     {**OPENAI_REQUEST, "model": "oa-text", "stream": False}),
    ("ollama -> openai", "/api/chat", OLLAMA_REQUEST, "to-openai", {
        "model": "oa-text",
        "messages": [{"role": "user", "content": [  # images first, as Ollama's templates place them
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
            {"type": "text", "text": "Describe it"},
        ]}],
        "temperature": 0.1, "max_tokens": 32, "stop": ["\n\n"], "reasoning_effort": "high",
        "response_format": {"type": "json_schema", "json_schema": {"name": "schema", "schema": SCHEMA}},
        "tools": [TOOL], "top_k": None, "repeat_penalty": None, "frequency_penalty": None, "stream": False,
    }),
    ("ollama -> vllm with extra_options", "/api/chat", OLLAMA_REQUEST, "to-vllm",
     {"model": "oa-text", "top_k": 40, "repeat_penalty": 1.1, "frequency_penalty": None}),
    # tool_choice "required" reaches Ollama as an extension field (tests/upstream/test_tool_choice.py)
    ("openai -> ollama", "/v1/chat/completions",
     {**OPENAI_REQUEST, "response_format": {"type": "json_object"}, "tool_choice": "auto"}, "to-ollama", {
        "model": "ol-thinking",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is this?", "images": [PNG_B64]},  # the data URI's base64
            {"role": "assistant", "tool_calls": [  # arguments as an object
                {"id": "call_1", "function": {"index": 0, "name": "get_weather", "arguments": {"city": "Oslo"}}}
            ]},
            {"role": "tool", "content": "-3 C", "tool_name": "get_weather", "tool_call_id": "call_1"},  # name looked up
        ],
        "options": {"temperature": 0.2, "top_p": 0.9, "num_predict": 64, "stop": ["END"], "seed": 7,
                    "presence_penalty": 0.5, "frequency_penalty": 0.25},
        "format": "json", "think": "low", "stream": False,
    }),
    ("ollama -> ollama: only the model name changes", "/api/chat", OLLAMA_REQUEST, "to-ollama", {
        "model": "ol-thinking", "messages": [{"role": "user", "content": "Describe it", "images": [PNG_B64]}],
        "options": OLLAMA_REQUEST["options"], "format": SCHEMA, "think": "high", "keep_alive": 600,
        "tools": [TOOL], "stream": False,
    }),
]


@pytest.mark.parametrize(("name", "path", "request_body", "entry", "expected"), CASES, ids=[c[0] for c in CASES])
def test_what_the_upstream_receives(
    gateway: RunningServer, openai_upstream: ReplayServer, ollama_upstream: ReplayServer,
    name: str, path: str, request_body: dict[str, Any], entry: str, expected: dict[str, Any],
) -> None:
    upstream = ollama_upstream if entry == "to-ollama" else openai_upstream
    before = len(upstream.received)
    # Not streamed: the upstream is asked for a whole reply too, as the client asked.
    response = httpx.post(gateway.url + path, json={**request_body, "model": entry, "stream": False}, timeout=10)
    assert response.status_code == 200, response.text
    [received] = upstream.received[before:]
    assert received.headers["accept-encoding"] == "identity"  # bodies are read raw, chunk by chunk
    body = received.json()
    if name.endswith("only the model name changes") and entry == "to-openai":
        assert body == expected
    for key, value in expected.items():
        assert body.get(key) == value, key


def test_options_without_an_openai_field_are_logged_when_dropped(gateway: RunningServer) -> None:
    with capture_logs() as logs:
        response = httpx.post(gateway.url + "/api/chat", json={**OLLAMA_REQUEST, "model": "to-openai", "stream": False})
    assert response.status_code == 200
    [dropped] = [entry for entry in logs if "dropped" in entry["event"]]
    assert dropped["dropped"] == ["top_k", "repeat_penalty"] and dropped["model"] == "to-openai"
