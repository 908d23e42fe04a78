"""SmolLM2 through ctransformers behind the real server over HTTP, with the official
clients — both dialects, streaming and not — plus disconnects and concurrency."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import ollama
import openai
import pytest

from dragoman.backends.ctransformers import CTransformersBackend
from dragoman.config.schema import ModelRoute
from dragoman.proxy.models import build_backend
from tests.ctransformers.conftest import needs_library
from tests.support.server import RunningServer, config_from_yaml, serve
from tests.support.sse import named_events

pytestmark = needs_library
MODEL = "smollm2-ct"
QUESTION = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the capital of France?"},
]
STORY = [{"role": "user", "content": "Write a very long story about a dragon."}]


class Served:
    def __init__(self, server: RunningServer, backends: dict[str, CTransformersBackend]) -> None:
        self.server = server
        self.backends = backends

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture(scope="module")
def served(smollm2_gguf: Path) -> Iterator[Served]:
    config = config_from_yaml(
        f"""\
        models:
          - name: {MODEL}
            backend: ctransformers
            path: {smollm2_gguf}
            threads: 1
            context_length: 1024
            max_concurrent: 2
            defaults: {{temperature: 0, repeat_penalty: 1.0}}
            keep_alive: -1
        """
    )
    backends: dict[str, CTransformersBackend] = {}

    def keep(route: ModelRoute) -> Any:
        backend = build_backend(route)
        backends[route.config.name] = backend
        return backend

    with serve(config, backend_factory=keep) as server:
        yield Served(server, backends)


@pytest.fixture(scope="module")
def oa(served: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def ol(served: Served) -> ollama.Client:
    return ollama.Client(host=served.url)


def test_openai_client_whole_and_streamed(oa: openai.OpenAI) -> None:
    whole = oa.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=24)  # type: ignore[arg-type]
    answer = whole.choices[0].message.content
    assert "Paris" in answer and whole.choices[0].finish_reason == "stop"
    assert whole.usage.prompt_tokens > 20 and 0 < whole.usage.completion_tokens <= 24
    chunks = list(
        oa.chat.completions.create(
            model=MODEL,
            messages=QUESTION,
            max_tokens=24,
            stream=True,
            stream_options={"include_usage": True},  # type: ignore[arg-type]
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == answer
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_openai_max_tokens_is_a_length_finish(oa: openai.OpenAI) -> None:
    reply = oa.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=3)  # type: ignore[arg-type]
    assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens == 3


def test_ollama_client_whole_and_streamed(ol: ollama.Client) -> None:
    whole = ol.chat(model=MODEL, messages=QUESTION, options={"num_predict": 24})
    assert "Paris" in whole.message.content and whole.done_reason == "stop"
    assert whole.prompt_eval_count > 20 and 0 < whole.eval_count <= 24
    parts = list(ol.chat(model=MODEL, messages=QUESTION, options={"num_predict": 24}, stream=True))
    assert "".join(p.message.content for p in parts) == whole.message.content
    assert parts[-1].done and parts[-1].eval_count == whole.eval_count and parts[-1].eval_duration > 0


def test_anthropic_message_start_carries_the_prompts_input_tokens(served: Served) -> None:
    """The prompt is tokenized before the first token, so message_start reports its
    input_tokens as Anthropic does (Claude Code reads them there); message_delta repeats them."""
    counted = httpx.post(served.url + "/v1/messages/count_tokens", json={"model": MODEL, "messages": QUESTION[1:], "system": QUESTION[0]["content"]}, timeout=60)
    assert counted.status_code == 200, counted.text
    ask = {"model": MODEL, "max_tokens": 8, "system": QUESTION[0]["content"], "messages": QUESTION[1:], "stream": True}
    with httpx.stream("POST", served.url + "/v1/messages", json=ask, timeout=60) as reply:
        events = named_events(reply.read().decode())
    (name, start), *_ = events
    assert name == "message_start" and start["message"]["usage"]["input_tokens"] == counted.json()["input_tokens"] > 20
    delta = next(data for name, data in events if name == "message_delta")
    assert delta["usage"]["input_tokens"] == start["message"]["usage"]["input_tokens"] and delta["usage"]["output_tokens"] > 0


def test_ollama_discovery(ol: ollama.Client) -> None:
    shown = ol.show(MODEL)
    assert shown.details.format == "gguf" and shown.details.family == "llama"
    assert shown.details.quantization_level == "Q4_1" and shown.details.parameter_size == "135M"
    assert MODEL in [m.model for m in ol.ps().models]


def test_unsupported_options_are_a_400_naming_them(served: Served) -> None:
    body = {"model": MODEL, "messages": QUESTION, "stream": False, "options": {"tfs_z": 0.5}}
    reply = httpx.post(served.url + "/api/chat", json=body, timeout=30)
    assert reply.status_code == 400 and "tfs_z" in reply.json()["error"]
    body = {
        "model": MODEL,
        "messages": QUESTION,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    }
    reply = httpx.post(served.url + "/v1/chat/completions", json=body, timeout=30)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "tools"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/api/chat"])
def test_a_disconnect_stops_generation(served: Served, path: str) -> None:
    backend = served.backends[MODEL]
    before = len(backend.history)
    body = {"model": MODEL, "stream": True, "messages": STORY, "max_tokens": 500, "options": {"num_predict": 500}}
    if path == "/api/chat":
        del body["max_tokens"]
    else:
        del body["options"]
    with httpx.stream("POST", served.url + path, json=body, timeout=30) as reply:
        lines = reply.iter_lines()
        for _ in range(4):
            next(lines)
    deadline = time.monotonic() + 10
    while len(backend.history) == before and time.monotonic() < deadline:
        time.sleep(0.02)
    record = backend.history[-1]
    assert record.reason == "cancelled" and record.tokens_at_cancel is not None
    assert record.completion_tokens - record.tokens_at_cancel <= 2
    assert record.completion_tokens < 100


def test_two_concurrent_requests_both_complete(oa: openai.OpenAI, ol: ollama.Client) -> None:
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        a = pool.submit(lambda: oa.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=24))  # type: ignore[arg-type]
        b = pool.submit(lambda: ol.chat(model=MODEL, messages=QUESTION, options={"num_predict": 24}))
        openai_reply, ollama_reply = a.result(timeout=60), b.result(timeout=60)
    assert openai_reply.choices[0].message.content == ollama_reply.message.content
    assert "Paris" in ollama_reply.message.content


def test_metrics_show_the_entrys_queue_and_running_requests(served: Served) -> None:
    """The instance pool's line is the backend's Admission, so /metrics reads it as it
    reads the ONNX backend's (it kept a queue of its own before, and showed nothing)."""
    body = {"model": MODEL, "stream": True, "messages": STORY, "max_tokens": 400}
    with httpx.stream("POST", served.url + "/v1/chat/completions", json=body, timeout=30) as reply:
        lines = reply.iter_lines()
        for _ in range(2):
            next(lines)
        running = httpx.get(served.url + "/metrics", timeout=10).text
    assert f'dragoman_active_requests{{model="{MODEL}"}} 1.0' in running
    assert f'dragoman_queue_depth{{model="{MODEL}"}} 0.0' in running
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        after = httpx.get(served.url + "/metrics", timeout=10).text
        if f'dragoman_active_requests{{model="{MODEL}"}} 0.0' in after:
            break
        time.sleep(0.05)
    assert f'dragoman_active_requests{{model="{MODEL}"}} 0.0' in after  # the instance came back
