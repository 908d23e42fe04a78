"""The real default model (SmolLM2-135M int4 on ONNX Runtime GenAI) through the real
server over HTTP, with the official clients — both dialects, streaming and not."""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from pathlib import Path

import httpx
import jsonschema
import ollama
import openai
import pytest

from tests.support.server import RunningServer, config_from_yaml, serve

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture(scope="module")
def oa(real_server: RunningServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=real_server.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def ol(real_server: RunningServer) -> ollama.Client:
    return ollama.Client(host=real_server.url)


def test_openai_answers_and_stream_equals_whole(oa: openai.OpenAI) -> None:
    whole = oa.chat.completions.create(model="smollm2:135m", messages=QUESTION, temperature=0, max_tokens=24)
    assert "Paris" in whole.choices[0].message.content
    assert whole.usage.prompt_tokens > 10 and 0 < whole.usage.completion_tokens <= 24
    streamed = "".join(
        chunk.choices[0].delta.content or ""
        for chunk in oa.chat.completions.create(
            model="smollm2:135m", messages=QUESTION, temperature=0, max_tokens=24, stream=True
        )
        if chunk.choices
    )
    assert streamed == whole.choices[0].message.content


def test_both_dialects_give_the_same_greedy_answer(oa: openai.OpenAI, ol: ollama.Client) -> None:
    via_openai = oa.chat.completions.create(model="gpt-4o-mini", messages=QUESTION, temperature=0, max_tokens=16)
    via_ollama = ol.chat(model="smollm2:135m", messages=QUESTION, options={"temperature": 0, "num_predict": 16})
    assert via_ollama.message.content == via_openai.choices[0].message.content
    parts = list(ol.chat(model="smollm2:135m", messages=QUESTION, options={"temperature": 0, "num_predict": 16}, stream=True))
    assert "".join(p.message.content for p in parts) == via_ollama.message.content
    assert parts[-1].done and parts[-1].eval_count == via_ollama.eval_count


def test_length_limit(oa: openai.OpenAI) -> None:
    reply = oa.chat.completions.create(model="smollm2:135m", messages=QUESTION, temperature=0, max_completion_tokens=3)
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 3


def test_structured_output_validates(oa: openai.OpenAI, ol: ollama.Client) -> None:
    ask = [{"role": "user", "content": "Make up a person with a name and an age."}]
    reply = oa.chat.completions.create(
        model="smollm2:135m", messages=ask, max_tokens=60,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}},
    )
    jsonschema.validate(json.loads(reply.choices[0].message.content), PERSON)
    native = ol.chat(model="smollm2:135m", messages=ask, format=PERSON, options={"num_predict": 60})
    jsonschema.validate(json.loads(native.message.content), PERSON)
    json_mode = ol.chat(model="smollm2:135m", messages=ask, format="json", options={"num_predict": 60})
    assert json_mode.message.content.startswith("{")
    if json_mode.done_reason == "stop":  # a tiny model may ramble past 60 tokens in JSON mode
        assert isinstance(json.loads(json_mode.message.content), dict)


def test_required_tool_call_is_valid(oa: openai.OpenAI, ol: ollama.Client) -> None:
    ask = [{"role": "user", "content": "What's the weather in Paris?"}]
    reply = oa.chat.completions.create(model="smollm2:135m", messages=ask, tools=[WEATHER_TOOL], tool_choice="required", max_tokens=60)
    call = reply.choices[0].message.tool_calls[0]
    assert reply.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather" and call.id
    jsonschema.validate(json.loads(call.function.arguments), WEATHER_TOOL["function"]["parameters"])
    streamed = list(
        oa.chat.completions.create(model="smollm2:135m", messages=ask, tools=[WEATHER_TOOL], tool_choice="required", max_tokens=60, stream=True)
    )
    deltas = [c for chunk in streamed if chunk.choices for c in (chunk.choices[0].delta.tool_calls or [])]
    assert deltas[0].index == 0 and deltas[0].function.name == "get_weather"
    native = ol.chat(
        model="smollm2:135m", messages=ask, tools=[WEATHER_TOOL],
        options={"num_predict": 60},
    )
    for tool_call in native.message.tool_calls or []:
        assert isinstance(tool_call.function.arguments, dict)


# Pydantic's model_json_schema(), zod-to-json-schema and MCP servers keep shared types in
# ``$defs`` and point at them with ``#/$defs/…`` from the root of the parameters.
DEFS_PARAMETERS = {
    "$defs": {"Unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"$ref": "#/$defs/Unit"}},
    "required": ["city", "unit"],
}


def test_a_forced_tool_whose_parameters_use_defs_is_called_in_every_dialect(
    oa: openai.OpenAI, real_server: RunningServer
) -> None:
    """Forced calls were a 400 ("Pointer '/$defs/Unit' does not exist") in every
    dialect: the parameters sit inside the call's schema, so their ``#/$defs`` refs
    looked at the wrong root."""
    import anthropic

    ask = [{"role": "user", "content": "What's the weather in Paris?"}]
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": DEFS_PARAMETERS}}
    reply = oa.chat.completions.create(model="smollm2:135m", messages=ask, tools=[tool], tool_choice="required", max_tokens=60)
    jsonschema.validate(json.loads(reply.choices[0].message.tool_calls[0].function.arguments), DEFS_PARAMETERS)
    claude = anthropic.Anthropic(base_url=real_server.url, api_key="unused", max_retries=0)
    message = claude.messages.create(
        model="smollm2:135m", max_tokens=60, messages=ask, tool_choice={"type": "tool", "name": "get_weather"},
        tools=[{"name": "get_weather", "input_schema": DEFS_PARAMETERS}],
    )
    used = [block for block in message.content if block.type == "tool_use"]
    assert message.stop_reason == "tool_use" and used[0].name == "get_weather"
    jsonschema.validate(used[0].input, DEFS_PARAMETERS)
    response = oa.responses.create(
        model="smollm2:135m", input="What's the weather in Paris?", max_output_tokens=60, tool_choice="required",
        tools=[{"type": "function", "name": "get_weather", "parameters": DEFS_PARAMETERS, "strict": False}],
    )
    calls = [item for item in response.output if item.type == "function_call"]
    jsonschema.validate(json.loads(calls[0].arguments), DEFS_PARAMETERS)
    native = httpx.post(real_server.url + "/api/chat", timeout=60, json={
        "model": "smollm2:135m", "messages": ask, "stream": False, "tools": [tool], "tool_choice": "required",
        "options": {"num_predict": 60}})
    assert native.status_code == 200, native.text
    jsonschema.validate(native.json()["message"]["tool_calls"][0]["function"]["arguments"], DEFS_PARAMETERS)


def test_tool_choice_none_forbids_calls(oa: openai.OpenAI) -> None:
    ask = [{"role": "user", "content": "What's the weather in Paris?"}]
    reply = oa.chat.completions.create(model="smollm2:135m", messages=ask, tools=[WEATHER_TOOL], tool_choice="none", max_tokens=30)
    assert reply.choices[0].message.tool_calls is None
    assert reply.choices[0].finish_reason in ("stop", "length")


def test_logprobs_both_dialects(oa: openai.OpenAI, real_server: RunningServer) -> None:
    reply = oa.chat.completions.create(model="smollm2:135m", messages=QUESTION, max_tokens=4, logprobs=True, top_logprobs=3, temperature=0)
    tokens = reply.choices[0].logprobs.content
    assert len(tokens) == reply.usage.completion_tokens
    assert all(len(t.top_logprobs) == 3 and t.logprob <= 0 for t in tokens)
    native = httpx.post(real_server.url + "/api/chat", json={"model": "smollm2:135m", "messages": QUESTION, "stream": False, "logprobs": True, "top_logprobs": 2, "options": {"num_predict": 4, "temperature": 0}}, timeout=60).json()
    assert len(native["logprobs"]) == native["eval_count"]


def test_streamed_logprobs_share_the_chunk_of_their_text(real_server: RunningServer) -> None:
    """Clients pair logprobs with the text of the same chunk (OpenAI and Ollama do so)."""
    body = {"model": "smollm2:135m", "messages": QUESTION, "logprobs": True, "stream": True}
    sse = {**body, "max_tokens": 6, "temperature": 0}
    with httpx.stream("POST", real_server.url + "/v1/chat/completions", json=sse, timeout=60) as reply:
        chunks = [json.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: {")]
    choices = [c["choices"][0] for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert len(choices) >= 2
    for choice in choices:
        assert "".join(t["token"] for t in choice["logprobs"]["content"]) == choice["delta"]["content"]
    assert not [c for c in chunks if c["choices"] and c["choices"][0].get("logprobs") and not c["choices"][0]["delta"].get("content")]
    ndjson = {**body, "options": {"num_predict": 6, "temperature": 0}}
    with httpx.stream("POST", real_server.url + "/api/chat", json=ndjson, timeout=60) as reply:
        lines = [json.loads(line) for line in reply.iter_lines() if line]
    texts = [line for line in lines if not line["done"]]
    assert texts and all("".join(t["token"] for t in line["logprobs"]) == line["message"]["content"] for line in texts)


def test_num_ctx_beyond_the_configured_context_is_clamped_in_both_dialects(ol: ollama.Client, oa: openai.OpenAI) -> None:
    """The entry's context_length (2048) is the operator's memory bound: num_ctx 8192
    does not let a ~3000-token prompt run on /api/chat, as /v1 refuses it too."""
    long = [{"role": "user", "content": "word " * 3000}]
    with pytest.raises(ollama.ResponseError) as native:
        ol.chat(model="smollm2:135m", messages=long, options={"num_ctx": 8192, "num_predict": 1})
    assert native.value.status_code == 400 and "context length of 2048" in native.value.error
    with pytest.raises(openai.BadRequestError) as compatible:
        oa.chat.completions.create(model="smollm2:135m", messages=long, max_tokens=1)
    assert "context length of 2048" in compatible.value.message


def test_any_role_reaches_the_template(ol: ollama.Client) -> None:
    """Ollama leaves roles to the template; SmolLM2's writes any role as a turn."""
    reply = ol.chat(model="smollm2:135m", messages=[{"role": "Narrator", "content": "Once upon a time."}, *QUESTION],
                    options={"num_predict": 2})  # fmt: skip
    assert reply.done and reply.prompt_eval_count > 10


def test_thinking_on_a_model_that_cannot_think_is_400(ol: ollama.Client, oa: openai.OpenAI) -> None:
    with pytest.raises(ollama.ResponseError) as info:
        ol.chat(model="smollm2:135m", messages=QUESTION, think=True)
    assert info.value.status_code == 400 and "thinking" in info.value.error
    with pytest.raises(openai.BadRequestError):
        oa.chat.completions.create(model="smollm2:135m", messages=QUESTION, reasoning_effort="high")


def test_discovery_reports_the_real_model(ol: ollama.Client, real_server: RunningServer) -> None:
    ol.chat(model="smollm2:135m", messages=QUESTION, options={"num_predict": 2})
    shown = ol.show("smollm2:135m")
    assert set(shown.capabilities) >= {"completion", "tools"} and "thinking" not in shown.capabilities
    assert shown.details.quantization_level == "int4"
    running = ol.ps().models
    assert [m.model for m in running if m.model != "all-minilm"] == ["smollm2:135m"]  # embedding tests load it
    assert running[0].size > 10_000_000 and running[0].expires_at is not None
    tags = httpx.get(real_server.url + "/api/tags").json()["models"]
    assert tags[0]["details"]["format"] == "onnx"


def test_event_loop_stays_free_during_generation(real_server: RunningServer) -> None:
    """/api/version answers promptly while four generations stream."""
    body = {"model": "smollm2:135m", "messages": [{"role": "user", "content": "Tell me a long story about a dragon."}],
            "options": {"num_predict": 400, "temperature": 0.7, "seed": 1}}
    streaming = threading.Barrier(5)

    def generate() -> int:
        lines = 0
        with httpx.stream("POST", real_server.url + "/api/chat", json=body, timeout=120) as r:
            for _ in r.iter_lines():
                lines += 1
                if lines == 1:
                    streaming.wait(timeout=60)
        return lines

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        streams = [pool.submit(generate) for _ in range(4)]
        streaming.wait(timeout=60)  # sample only while all four are generating
        latencies = []
        with httpx.Client() as client:
            while not any(s.done() for s in streams) and len(latencies) < 40:
                started = time.perf_counter()
                assert client.get(real_server.url + "/api/version").status_code == 200
                latencies.append(time.perf_counter() - started)
                time.sleep(0.02)
        counts = [s.result() for s in streams]
    assert all(count > 20 for count in counts)
    assert len(latencies) >= 10, f"the generations ended after {len(latencies)} samples"
    latencies.sort()
    # an event loop blocked by a token step or a prefill would show here as 10s of ms
    assert latencies[len(latencies) // 2] < 0.05, latencies


def test_ready_reports_the_model(real_server: RunningServer) -> None:
    ready = httpx.get(real_server.url + "/health/ready").json()
    assert ready["status"] == "ready"
    model = next(check for check in ready["checks"] if check["name"] == "model:smollm2:135m")
    assert model["ok"] and model["detail"]


def test_ready_fails_for_a_missing_model(tmp_path: Path) -> None:
    config = config_from_yaml(f"models:\n  - {{name: gone, backend: onnx, path: {tmp_path / 'nothing'}, provider: cpu}}\n")
    with serve(config) as server:
        r = httpx.get(server.url + "/health/ready")
    assert r.status_code == 503
    check = r.json()["checks"][1]
    assert check["ok"] is False and "dragoman models prepare" in check["detail"]


def test_same_seed_same_output_for_any_seed(ol: ollama.Client) -> None:
    options = {"temperature": 0.9, "seed": 2**40 + 7, "top_k": 10**6, "num_predict": 12}
    first = ol.chat(model="smollm2:135m", messages=QUESTION, options=options).message.content
    second = ol.chat(model="smollm2:135m", messages=QUESTION, options=options).message.content
    assert first == second and first
