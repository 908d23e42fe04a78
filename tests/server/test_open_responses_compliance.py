"""The Open Responses compliance suite's cases (openresponses/openresponses,
``src/lib/compliance-tests.ts``, run by ``scripts/compliance-test.ts --base-url``), driven
from here: the same requests over real HTTP, every whole reply and every stream event
checked against the spec's schemas (``tests/fixtures/openresponses/response_schema.json``,
an excerpt of the spec's openapi), then the suite's own checks (output present, status
``completed``, the function-call events).

On an upstream-backed entry (a stand-in OpenAI-compatible server) every case runs as the
suite sends it. On the local model the text cases run as sent; the tool cases add
``tool_choice: "required"`` (a 135M model does not choose to call by itself) and
``image-input`` is left out (a text model refuses images by name), and every case caps
``max_output_tokens`` at 48 (the model loops to 2,000 tokens on two of the prompts),
so ``incomplete`` at that cap counts as the suite's ``completed``.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from tests.support.replay import ReplayServer, Reply, replay_server
from tests.support.server import RunningServer, config_from_yaml, serve

SPEC = json.loads((Path(__file__).parents[1] / "fixtures" / "openresponses" / "response_schema.json").read_text())


def _red_png(size: int = 32) -> str:
    """A red square, as a PNG data URL (the suite sends a 32x32 red heart icon; the
    request's shape, not the picture, is what is checked)."""
    row = b"\x00" + b"\xff\x00\x00" * size
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(row * size)) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(png).decode()


RED_PNG = _red_png()
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a location",
    "parameters": {
        "type": "object",
        "properties": {"location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"}},
        "required": ["location"],
    },
}


def _message(role: str, content: Any) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": content}


# id → (request without model, streaming, the suite's extra checks)
CASES: dict[str, tuple[dict[str, Any], bool]] = {
    "basic-response": ({"input": [_message("user", "Say hello in exactly 3 words.")]}, False),
    "streaming-response": ({"input": [_message("user", "Count from 1 to 5.")]}, True),
    "system-prompt": (
        {"input": [_message("system", "You are a pirate. Always respond in pirate speak."), _message("user", "Say hello.")]},
        False,
    ),
    "tool-calling": ({"input": [_message("user", "What's the weather like in San Francisco?")], "tools": [WEATHER_TOOL]}, False),
    "tool-calling-streaming": (
        {"input": [_message("user", "What's the weather like in San Francisco?")], "tools": [WEATHER_TOOL]},
        True,
    ),
    "image-input": (
        {"input": [_message("user", [
            {"type": "input_text", "text": "What do you see in this image? Answer in one sentence."},
            {"type": "input_image", "image_url": RED_PNG},
        ])]},
        False,
    ),
    "multi-turn": (
        {"input": [
            _message("user", "My name is Alice."),
            _message("assistant", "Hello Alice! Nice to meet you. How can I help you today?"),
            _message("user", "What is my name?"),
        ]},
        False,
    ),
}
TOOL_CASES = {"tool-calling", "tool-calling-streaming"}


def _validator(name: str) -> jsonschema.protocols.Validator:
    return jsonschema.Draft202012Validator({**SPEC, "$ref": f"#/$defs/{name}"})


RESOURCE, EVENT = _validator("ResponseResource"), _validator("StreamingEvent")


def _schema_errors(validator: jsonschema.protocols.Validator, value: Any, where: str) -> list[str]:
    return [f"{where}{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(value)]


def _events(response: httpx.Response) -> list[dict[str, Any]]:
    """The suite's SSE reading: ``data:`` lines, ``[DONE]`` skipped."""
    events = []
    for block in response.text.split("\n\n"):
        data = [line.removeprefix("data:").strip() for line in block.split("\n") if line.startswith("data:")]
        if data and data[-1] != "[DONE]":
            events.append(json.loads(data[-1]))
    return events


def run_case(
    base_url: str, model: str, case_id: str, body: dict[str, Any], stream: bool, *, capped: bool = False
) -> list[str]:
    """The suite's ``runTest``: its errors for one case (empty: passed). ``capped``: the
    request sets ``max_output_tokens``, and ``incomplete`` at that cap passes too."""
    request = {"model": model, **body, "stream": stream}
    reply = httpx.post(f"{base_url}/responses", json=request, headers={"Authorization": "Bearer test"}, timeout=300)
    if reply.status_code != 200:
        return [f"HTTP {reply.status_code}: {reply.text}"]
    errors: list[str] = []
    if stream:
        events = _events(reply)
        if not events:
            return ["No streaming events received"]
        for event in events:
            errors += _schema_errors(EVENT, event, f"event {event.get('type')}: ")
        final = next((e["response"] for e in reversed(events) if e.get("type") in
                      ("response.completed", "response.failed", "response.incomplete")), None)
        if case_id == "tool-calling-streaming":
            errors += _function_call_events(events)
    else:
        final = reply.json()
    if final is None:
        return [*errors, "no final response"]
    errors += _schema_errors(RESOURCE, final, "")
    if case_id not in ("streaming-response", "tool-calling-streaming") and not final.get("output"):
        errors.append("Response has no output items")
    if case_id.startswith("tool-calling"):
        if not any(item.get("type") == "function_call" for item in final.get("output", [])):
            errors.append('Expected output item of type "function_call" but none found')
    elif final.get("status") != "completed" and not (capped and final.get("incomplete_details") == {"reason": "max_output_tokens"}):
        errors.append(f'Expected status "completed" but got "{final.get("status")}"')
    return errors


def _function_call_events(events: list[dict[str, Any]]) -> list[str]:
    types = [e.get("type") for e in events]
    errors = []
    for kind in ("response.output_item.added", "response.output_item.done"):
        if not any(e.get("type") == kind and e.get("item", {}).get("type") == "function_call" for e in events):
            errors.append(f"Missing {kind} event with function_call item")
    for kind in ("response.function_call_arguments.delta", "response.function_call_arguments.done"):
        if kind not in types:
            errors.append(f"Missing {kind} event")
    return errors


@pytest.fixture(scope="module")
def upstream() -> Iterator[ReplayServer]:
    script: dict[str, Reply | list[Reply]] = {
        "oa-text": Reply("openai/vllm_text.sse", whole="openai/vllm_text.json"),
        "oa-tools": Reply("openai/gpt4o_parallel_tool_calls.sse", whole="openai/gpt4o_parallel_tool_calls.json"),
        "/v1/models": Reply("openai/models.json"),
    }
    with replay_server(script) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(upstream: ReplayServer) -> Iterator[RunningServer]:
    config = config_from_yaml(f"""\
        models:
          - name: tuned
            backend: openai
            base_url: {upstream.url}/v1
            model: oa-text
            defaults: {{temperature: 0.3, presence_penalty: 0.5}}
          - name: "oa-*"
            backend: openai
            base_url: {upstream.url}/v1
        """)
    with serve(config) as server:
        yield server


@pytest.mark.parametrize("case_id", list(CASES))
def test_case_on_an_upstream_entry(gateway: RunningServer, case_id: str) -> None:
    body, stream = CASES[case_id]
    model = "oa-tools" if case_id in TOOL_CASES else "oa-text"
    assert run_case(gateway.url + "/v1", model, case_id, body, stream) == []


@pytest.mark.parametrize("case_id", [case for case in CASES if case != "image-input"])
def test_case_on_the_local_model(real_server: RunningServer, case_id: str) -> None:
    body, stream = CASES[case_id]
    if case_id in TOOL_CASES:
        body = {**body, "tool_choice": "required"}
    body = {**body, "max_output_tokens": 48}
    assert run_case(real_server.url + "/v1", "smollm2:135m", case_id, body, stream, capped=True) == []


def test_the_schema_catches_what_the_suite_caught() -> None:
    """The fixture refuses the reply of before (null temperature, no penalties, a function
    tool without ``strict``), so the cases above cannot pass vacuously."""
    before = {
        "id": "resp_1", "object": "response", "created_at": 1, "completed_at": 2, "status": "completed",
        "incomplete_details": None, "model": "m", "previous_response_id": None, "instructions": None, "output": [],
        "error": None, "tools": [{k: v for k, v in WEATHER_TOOL.items()}], "tool_choice": "auto",
        "truncation": "disabled", "parallel_tool_calls": True, "text": {"format": {"type": "text"}}, "top_p": None,
        "temperature": None, "reasoning": {}, "user": None, "usage": None, "max_output_tokens": None,
        "max_tool_calls": None, "store": True, "background": False, "service_tier": "default", "metadata": {},
        "prompt_cache_key": None,
    }
    fields = {e.absolute_path[0] if e.absolute_path else e.message.split("'")[1] for e in RESOURCE.iter_errors(before)}
    assert {"top_p", "temperature", "presence_penalty", "frequency_penalty", "top_logprobs", "safety_identifier", "tools"} <= fields


def test_the_reply_names_the_sampling_numbers_used(gateway: RunningServer) -> None:
    """The entry's defaults where the request says nothing, the request's where it does,
    OpenAI's defaults where neither does; a function tool sent without ``strict`` is
    echoed with ``strict: false`` (its arguments are not constrained to the schema)."""
    url = gateway.url + "/v1/responses"
    defaults = httpx.post(url, json={"model": "tuned", "input": "hi", "tools": [WEATHER_TOOL], "safety_identifier": "u-1"}).json()
    assert (defaults["temperature"], defaults["presence_penalty"], defaults["top_p"], defaults["frequency_penalty"]) == (0.3, 0.5, 1.0, 0.0)
    assert defaults["tools"] == [{**WEATHER_TOOL, "strict": False}] and defaults["safety_identifier"] == "u-1"
    assert defaults["top_logprobs"] == 0
    asked = httpx.post(url, json={"model": "tuned", "input": "hi", "temperature": 0.9, "top_p": 0.5,
                                  "tools": [{**WEATHER_TOOL, "strict": True}]}).json()
    assert (asked["temperature"], asked["top_p"]) == (0.9, 0.5) and asked["tools"][0]["strict"] is True
