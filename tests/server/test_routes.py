"""Routes, framing, routing and disconnects over real HTTP, with the scripted backend
standing in for failures and timing a real model cannot produce on demand."""

from __future__ import annotations

import datetime as dt
import json
import time

import httpx
import ollama
import openai
import pytest
import yaml

from tests.support.scripted import ScriptedBackend
from tests.support.server import RunningServer
from tests.support.seed_spec import SEED_SPEC


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_root_and_head(scripted_server: RunningServer) -> None:
    r = httpx.get(scripted_server.url + "/")
    assert (r.status_code, r.text) == (200, "Ollama is running")
    assert r.headers["content-type"].startswith("text/plain")
    h = httpx.head(scripted_server.url + "/")
    assert h.status_code == 200 and h.content == b""


def test_version(scripted_server: RunningServer) -> None:
    body = httpx.get(scripted_server.url + "/api/version").json()
    assert body["version"].count(".") == 2


def test_request_id_is_echoed_or_generated(scripted_server: RunningServer) -> None:
    r = httpx.get(scripted_server.url + "/api/version", headers={"X-Request-Id": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    generated = {httpx.get(scripted_server.url + "/api/version").headers["x-request-id"] for _ in range(3)}
    assert len(generated) == 3


def test_model_lists(scripted_server: RunningServer) -> None:
    data = httpx.get(scripted_server.url + "/v1/models").json()
    assert data["object"] == "list"
    assert [m["id"] for m in data["data"]] == ["scripted", "no-tools", "nickname"]
    assert all(m["object"] == "model" and isinstance(m["created"], int) for m in data["data"])
    tags = ollama.Client(host=scripted_server.url).list()
    assert [m.model for m in tags.models] == ["scripted", "no-tools", "nickname"]
    card = openai.OpenAI(base_url=scripted_server.url + "/v1", api_key="x").models.retrieve("nickname")
    assert card.id == "nickname"
    assert httpx.get(scripted_server.url + "/v1/models/nope").status_code == 404


def test_show(scripted_server: RunningServer) -> None:
    shown = ollama.Client(host=scripted_server.url).show("scripted")
    assert "completion" in shown.capabilities and "tools" in shown.capabilities
    assert "temperature" in shown.parameters
    assert httpx.post(scripted_server.url + "/api/show", json={"model": "zzz"}).status_code == 404


def test_openai_nonstream_and_defaults(scripted_server: RunningServer) -> None:
    client = openai.OpenAI(base_url=scripted_server.url + "/v1", api_key="x")
    first = client.chat.completions.create(model="scripted", messages=user("hi"))
    second = client.chat.completions.create(model="nickname", messages=user("hi"), temperature=0.9)
    assert first.choices[0].message.content == "Hello, world"
    assert first.choices[0].finish_reason == "stop"
    assert first.usage.total_tokens == 10
    assert first.id != second.id and first.id.startswith("chatcmpl-")
    assert abs(first.created - time.time()) < 5
    assert ScriptedBackend.last_request.options.temperature == 0.9  # the request wins
    client.chat.completions.create(model="scripted", messages=user("hi"))
    assert ScriptedBackend.last_request.options.temperature == 0.3  # the model default fills in
    assert first.model == "scripted" and second.model == "nickname"


def test_openai_stream_framing(scripted_server: RunningServer) -> None:
    body = {"model": "scripted", "stream": True, "stream_options": {"include_usage": True}, "messages": user("hi")}
    with httpx.stream("POST", scripted_server.url + "/v1/chat/completions", json=body) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = r.read().decode()
    blocks = raw.split("\n\n")
    assert blocks[-1] == "" and blocks[-2] == "data: [DONE]"
    chunks = [json.loads(b.removeprefix("data: ")) for b in blocks[:-2]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert len({c["id"] for c in chunks}) == 1 and len({c["created"] for c in chunks}) == 1
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 10
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "Hello, world"


def test_ollama_stream_framing(scripted_server: RunningServer) -> None:
    with httpx.stream("POST", scripted_server.url + "/api/chat", json={"model": "scripted", "messages": user("hi")}) as r:
        assert r.headers["content-type"].startswith("application/x-ndjson")
        raw = r.read().decode()
    assert raw.endswith("\n")
    lines = [json.loads(line) for line in raw.splitlines()]
    assert all(line["done"] is False for line in lines[:-1]) and lines[-1]["done"] is True
    assert lines[-1]["done_reason"] == "stop"
    assert lines[-1]["prompt_eval_count"] == 7 and lines[-1]["eval_count"] == 3
    created = dt.datetime.fromisoformat(lines[0]["created_at"].replace("Z", "+00:00")[:26] + "+00:00")
    assert abs((created - dt.datetime.now(dt.timezone.utc)).total_seconds()) < 5
    assert "".join(line["message"]["content"] for line in lines) == "Hello, world"


def test_ollama_nonstream(scripted_server: RunningServer) -> None:
    reply = ollama.Client(host=scripted_server.url).chat(model="family-7b", messages=user("script:think"), think=True)
    assert reply.message.content == "Done."
    assert reply.message.thinking == "Let me think. "
    assert reply.done and reply.done_reason == "stop"


def test_tool_calls_both_dialects(scripted_server: RunningServer) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    oa = openai.OpenAI(base_url=scripted_server.url + "/v1", api_key="x")
    reply = oa.chat.completions.create(model="scripted", messages=user("script:tools"), tools=tools)
    calls = reply.choices[0].message.tool_calls
    assert reply.choices[0].finish_reason == "tool_calls"
    assert reply.choices[0].message.content is None
    assert [json.loads(c.function.arguments) for c in calls] == [{"city": "Paris"}, {"tz": "CET"}]
    streamed: dict[int, str] = {}
    for chunk in oa.chat.completions.create(model="scripted", messages=user("script:fragments"), tools=tools, stream=True):
        for call in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            streamed[call.index] = streamed.get(call.index, "") + (call.function.arguments or "")
    assert {i: json.loads(a) for i, a in streamed.items()} == {0: {"city": "Oslo"}, 1: {"tz": "UTC"}}
    ol = ollama.Client(host=scripted_server.url)
    parts = list(ol.chat(model="scripted", messages=user("script:fragments"), tools=tools, stream=True))
    whole = [c for p in parts for c in (p.message.tool_calls or [])]
    assert [(c.function.name, dict(c.function.arguments)) for c in whole] == [
        ("get_weather", {"city": "Oslo"}),
        ("get_time", {"tz": "UTC"}),
    ]


def test_empty_messages_load_and_unload(scripted_server: RunningServer) -> None:
    client = ollama.Client(host=scripted_server.url)
    loaded = httpx.post(scripted_server.url + "/api/chat", json={"model": "scripted", "messages": []}).json()
    assert loaded["done_reason"] == "load" and loaded["done"] is True
    assert "scripted" in [m.model for m in client.ps().models]  # other tests may have loaded others
    unloaded = httpx.post(scripted_server.url + "/api/chat", json={"model": "scripted", "messages": [], "keep_alive": 0}).json()
    assert unloaded["done_reason"] == "unload"
    assert "scripted" not in [m.model for m in client.ps().models]


def _wait_until(predicate: object, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/api/chat"])
def test_stream_disconnect_stops_backend(scripted_server: RunningServer, path: str) -> None:
    body = {"model": "scripted", "stream": True, "messages": user("script:slow")}
    with httpx.stream("POST", scripted_server.url + path, json=body) as r:
        lines = r.iter_lines()
        for _ in range(3):
            next(lines)
    key = ScriptedBackend.started[-1]
    assert key.startswith("slow#")
    assert _wait_until(lambda: key in ScriptedBackend.cancelled)
    produced = ScriptedBackend.produced[key]
    time.sleep(0.2)
    assert ScriptedBackend.produced[key] == produced < 200


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/api/chat"])
def test_nonstream_disconnect_stops_backend(scripted_server: RunningServer, path: str) -> None:
    body = {"model": "scripted", "stream": False, "messages": user("script:slow")}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(scripted_server.url + path, json=body, timeout=httpx.Timeout(5.0, read=0.3))
    key = ScriptedBackend.started[-1]
    assert _wait_until(lambda: key in ScriptedBackend.cancelled)
    assert ScriptedBackend.produced[key] < 200



def test_openapi_document_describes_both_chat_endpoints(scripted_server: RunningServer) -> None:
    """The served document's request bodies carry every property the seed spec names."""
    doc = httpx.get(scripted_server.url + "/schema/openapi.json").json()
    seed = yaml.safe_load(SEED_SPEC.read_text())["components"]["schemas"]
    served = doc["components"]["schemas"]
    bodies = {
        "/v1/chat/completions": "ChatCompletionRequest",
        "/api/chat": "ChatRequest",
    }
    for path, name in bodies.items():
        body = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body["$ref"].endswith("/" + name)
        assert set(seed[name]["properties"]) <= set(served[name]["properties"]), name
        assert "model" in served[name]["required"]
    assert "messages" in served["ChatCompletionRequest"]["required"]
    for name in ("ModelOptions", "ChatMessage", "ChatCompletionMessage"):
        assert set(seed[name]["properties"]) <= set(served[name]["properties"]), name
