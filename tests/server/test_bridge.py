"""A dragoman instance as the upstream of another, through both HTTP backends: clients
of either dialect reach a server of the other, streaming and not."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import ollama
import openai
import pytest

from dragoman.adapters.canonical import ChatRequest, CompletionRequest
from tests.support.scripted import ScriptedBackend
from tests.support.server import RunningServer, config_from_yaml, serve


@pytest.fixture(scope="module")
def bridge(scripted_server: RunningServer) -> Iterator[RunningServer]:
    config = config_from_yaml(
        f"""\
        models:
          - name: via-openai
            backend: openai
            base_url: {scripted_server.url}/v1
            model: scripted
          - name: via-ollama
            backend: ollama
            base_url: {scripted_server.url}
            model: scripted
          - name: "up-*"
            backend: openai
            base_url: {scripted_server.url}/v1
          - name: dead
            backend: openai
            base_url: http://127.0.0.1:9/v1
            connect_timeout: 2
        """
    )
    with serve(config) as server:
        yield server


UPSTREAMS = ["via-openai", "via-ollama"]


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.mark.parametrize("model", UPSTREAMS)
def test_openai_client_through_upstream(bridge: RunningServer, model: str) -> None:
    client = openai.OpenAI(base_url=bridge.url + "/v1", api_key="x")
    reply = client.chat.completions.create(model=model, messages=user("hi"))
    assert reply.choices[0].message.content == "Hello, world"
    assert reply.usage.prompt_tokens == 7 and reply.usage.completion_tokens == 3
    assert reply.model == model
    text = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(model=model, messages=user("hi"), stream=True)
        if c.choices
    )
    assert text == "Hello, world"


@pytest.mark.parametrize("model", UPSTREAMS)
def test_ollama_client_through_upstream(bridge: RunningServer, model: str) -> None:
    client = ollama.Client(host=bridge.url)
    reply = client.chat(model=model, messages=user("script:think"), think=True)
    assert (reply.message.thinking, reply.message.content) == ("Let me think. ", "Done.")
    parts = list(client.chat(model=model, messages=user("hi"), stream=True))
    assert "".join(p.message.content for p in parts) == "Hello, world"
    assert parts[-1].done and parts[-1].eval_count == 3


GENERATE_KINDS = [
    # (kind, fields, what the dragoman upstream's backend is asked: chat, or a completion (raw, suffix))
    ("templated", {}, {"via-openai": "chat", "via-ollama": (False, None)}),
    ("raw", {"raw": True}, {"via-openai": (True, None), "via-ollama": (True, None)}),
    # /v1/completions prompts are raw; with a suffix raw makes no difference (the FIM frame is the model's)
    ("fill-in-the-middle", {"suffix": "}"}, {"via-openai": (True, "}"), "via-ollama": (False, "}")}),
]  # fmt: skip


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(("kind", "fields", "asked"), GENERATE_KINDS, ids=[k[0] for k in GENERATE_KINDS])
@pytest.mark.parametrize("model", UPSTREAMS)
def test_ollama_generate_through_upstream(
    bridge: RunningServer, model: str, kind: str, fields: dict[str, object], asked: dict[str, object], stream: bool
) -> None:
    client = ollama.Client(host=bridge.url)
    if stream:
        parts = list(client.generate(model=model, prompt="script:plain", stream=True, **fields))  # type: ignore[call-overload]
        text, final = "".join(p.response for p in parts), parts[-1]
    else:
        final = client.generate(model=model, prompt="script:plain", **fields)  # type: ignore[call-overload]
        text = final.response
    assert text == "Hello, world" and final.done and final.eval_count == 3
    request = ScriptedBackend.last_request
    if asked[model] == "chat":  # an OpenAI upstream templates through its chat endpoint
        assert isinstance(request, ChatRequest) and request.messages[-1].text == "script:plain"
    else:
        assert isinstance(request, CompletionRequest) and (request.raw, request.suffix) == asked[model]


@pytest.mark.parametrize("model", UPSTREAMS)
def test_openai_completions_through_upstream(bridge: RunningServer, model: str) -> None:
    client = openai.OpenAI(base_url=bridge.url + "/v1", api_key="x", max_retries=0)
    reply = client.completions.create(model=model, prompt=["script:plain", "script:length"])
    assert [c.text for c in reply.choices] == ["Hello, world", "cut short"]
    assert [c.finish_reason for c in reply.choices] == ["stop", "length"]
    chunks = list(client.completions.create(model=model, prompt="script:plain", stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "Hello, world"
    assert isinstance(ScriptedBackend.last_request, CompletionRequest) and ScriptedBackend.last_request.raw


@pytest.mark.parametrize("model", UPSTREAMS)
def test_fragmented_tool_calls_reach_ollama_clients_whole(bridge: RunningServer, model: str) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    parts = list(ollama.Client(host=bridge.url).chat(model=model, messages=user("script:fragments"), tools=tools, stream=True))
    calls = [c for p in parts for c in (p.message.tool_calls or [])]
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "Oslo"}),
        ("get_time", {"tz": "UTC"}),
    ]


def test_pattern_entry_forwards_the_requested_name(bridge: RunningServer) -> None:
    client = openai.OpenAI(base_url=bridge.url + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.NotFoundError, match="model 'up-anything' not found"):
        client.chat.completions.create(model="up-anything", messages=user("hi"))


@pytest.mark.parametrize("model", UPSTREAMS)
def test_upstream_midstream_error_reaches_client(bridge: RunningServer, model: str) -> None:
    with httpx.stream("POST", bridge.url + "/api/chat", json={"model": model, "messages": user("script:fail-midstream")}) as r:
        lines = [json.loads(line) for line in r.read().decode().splitlines()]
    assert lines[0]["message"]["content"] == "partial "
    assert "scripted failure" in lines[-1]["error"]


@pytest.mark.parametrize("model", UPSTREAMS)
def test_upstream_error_status_passes_through(bridge: RunningServer, model: str) -> None:
    r = httpx.post(bridge.url + "/v1/chat/completions", json={"model": model, "messages": user("script:busy")})
    assert r.status_code == 503
    assert "busy" in r.json()["error"]["message"]


def test_unreachable_upstream_is_502_naming_model_and_endpoint(bridge: RunningServer) -> None:
    r = httpx.post(bridge.url + "/api/chat", json={"model": "dead", "messages": user("hi")})
    assert r.status_code == 502
    message = r.json()["error"]
    assert "dead" in message and "127.0.0.1:9" in message


def test_load_and_unload_reach_an_ollama_upstream(bridge: RunningServer, scripted_server: RunningServer) -> None:
    upstream = ollama.Client(host=scripted_server.url)
    loaded = httpx.post(bridge.url + "/api/chat", json={"model": "via-ollama", "messages": []}).json()
    assert loaded["done_reason"] == "load"
    assert "scripted" in [m.model for m in upstream.ps().models]
    unloaded = httpx.post(bridge.url + "/api/chat", json={"model": "via-ollama", "messages": [], "keep_alive": 0}).json()
    assert unloaded["done_reason"] == "unload"
    assert "scripted" not in [m.model for m in upstream.ps().models]


def test_ready_and_metrics_report_upstreams(bridge: RunningServer) -> None:
    r = httpx.get(bridge.url + "/health/ready")
    assert r.status_code == 503  # the "dead" entry's upstream is unreachable
    checks = {c["name"]: c for c in r.json()["checks"]}
    assert checks["model:via-openai"]["ok"] and checks["model:via-ollama"]["ok"]
    assert checks["model:dead"]["ok"] is False and "127.0.0.1:9" in checks["model:dead"]["detail"]
    metrics = httpx.get(bridge.url + "/metrics").text
    assert 'dragoman_upstream_endpoint_healthy{endpoint="http://127.0.0.1:9/v1",model="dead"}' in metrics
