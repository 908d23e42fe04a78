"""Upstream failures reach clients in their own dialect: errors before the first byte
as HTTP errors with the upstream's status and message, failures after it as a last
error event followed by a clean end of the stream."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import ollama
import openai
import pytest

from tests.support.replay import ReplayServer, Reply, replay_server
from tests.support.server import RunningServer, config_from_yaml, free_port, serve
from tests.upstream.conftest import user

PATHS = {"openai": "/v1/chat/completions", "ollama": "/api/chat"}


def stream_frames(gateway: RunningServer, dialect: str, model: str) -> list[Any]:
    """Every frame of a streamed reply, read to the end (a cut stream raises here)."""
    body = {"model": model, "messages": user(), "stream": True}
    with httpx.stream("POST", gateway.url + PATHS[dialect], json=body, timeout=10) as response:
        assert response.status_code == 200
        text = response.read().decode()
    if dialect == "ollama":
        return [json.loads(line) for line in text.splitlines()]
    frames = [line.removeprefix("data: ") for line in text.split("\n\n") if line]
    return [frame if frame == "[DONE]" else json.loads(frame) for frame in frames]


def streamed_text(frames: list[Any], dialect: str) -> str:
    if dialect == "ollama":
        return "".join(f.get("message", {}).get("content", "") for f in frames)
    return "".join(c["delta"].get("content") or "" for f in frames if isinstance(f, dict) for c in f.get("choices", []))


MIDSTREAM = [
    # (name, model, text that got through, words of the error, status had nothing been sent)
    ("openai upstream ends without [DONE]", "oa-truncated", "Hello! How can", "ended before the reply was complete", 502),
    ("openai upstream connection dropped", "oa-abort", "Hello! How", "connection lost mid-reply", 502),
    ("openai upstream stalls", "oa-slow", "Hello! How", "idle_timeout", 504),
    ("openai upstream sends a broken chunk", "oa-malformed", "Hello!", "could not be read", 502),
    ("ollama upstream ends without done", "ol-truncated", "Hello! How", "before its final (done) line", 502),
    ("ollama upstream sends a broken line", "ol-malformed", "Hello! How", "could not be read", 502),
    ("ollama runner crashes", "ol-crash", "Hello! How", "unexpected EOF", 500),
    ("ollama upstream stalls", "ol-slow", "Hello", "idle_timeout", 504),
]


@pytest.mark.parametrize("dialect", ["openai", "ollama"])
@pytest.mark.parametrize(("name", "model", "partial", "words", "status"), MIDSTREAM, ids=[m[0] for m in MIDSTREAM])
def test_midstream_failure_is_an_error_event_then_a_clean_end(
    gateway: RunningServer, dialect: str, name: str, model: str, partial: str, words: str, status: int
) -> None:
    frames = stream_frames(gateway, dialect, model)
    assert streamed_text(frames, dialect) == partial
    if dialect == "openai":
        assert frames[-1] == "[DONE]"
        assert words in frames[-2]["error"]["message"]
    else:
        assert words in frames[-1]["error"] and not any(f.get("done") for f in frames)


@pytest.mark.parametrize(("name", "model", "partial", "words", "status"), MIDSTREAM, ids=[m[0] for m in MIDSTREAM])
def test_midstream_failure_without_streaming_is_an_http_error(
    gateway: RunningServer, name: str, model: str, partial: str, words: str, status: int
) -> None:
    response = httpx.post(gateway.url + "/v1/chat/completions", json={"model": model, "messages": user()}, timeout=10)
    assert response.status_code == status
    assert words in response.json()["error"]["message"]


def test_official_clients_see_the_midstream_error(gateway: RunningServer) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.APIError, match="connection lost mid-reply"):
        list(client.chat.completions.create(model="oa-abort", messages=user(), stream=True))
    with pytest.raises(ollama.ResponseError, match="idle_timeout"):
        list(ollama.Client(host=gateway.url).chat(model="ol-slow", messages=user(), stream=True))


def test_malformed_tool_arguments_are_an_error_event(gateway: RunningServer) -> None:
    frames = stream_frames(gateway, "ollama", "oa-bad-args")
    assert "not valid JSON" in frames[-1]["error"]
    assert not any(f.get("message", {}).get("tool_calls") for f in frames[:-1])
    response = httpx.post(gateway.url + "/v1/chat/completions", json={"model": "oa-bad-args", "messages": user()})
    assert response.status_code == 502 and "get_weather" in response.json()["error"]["message"]


STATUSES = [
    # (name, model, status, words of the upstream's message, OpenAI error type, Retry-After)
    ("401", "oa-401", 401, "Incorrect API key provided", "authentication_error", None),
    ("403", "oa-403", 403, "Country, region, or territory not supported", "permission_error", None),
    ("404", "oa-404", 404, "The model `gpt-5-turbo` does not exist", "not_found_error", None),
    ("429", "oa-429", 429, "Rate limit reached for gpt-4o", "rate_limit_error", "7"),
    ("503", "oa-503", 503, "The server is overloaded or not ready yet.", "overloaded_error", "3"),
    ("ollama 404", "ol-404", 404, 'model "llama3.2" not found, try pulling it first', "not_found_error", None),
]


@pytest.mark.parametrize(("name", "model", "status", "words", "kind", "retry_after"), STATUSES, ids=[s[0] for s in STATUSES])
def test_upstream_status_and_message_pass_through(
    gateway: RunningServer, name: str, model: str, status: int, words: str, kind: str, retry_after: str | None
) -> None:
    for stream in (False, True):
        body = {"model": model, "messages": user(), "stream": stream}
        as_openai = httpx.post(gateway.url + "/v1/chat/completions", json=body)
        as_ollama = httpx.post(gateway.url + "/api/chat", json=body)
        assert (as_openai.status_code, as_ollama.status_code) == (status, status)
        assert words in as_openai.json()["error"]["message"] and words in as_ollama.json()["error"]
        assert as_openai.json()["error"]["type"] == kind
        assert as_openai.headers.get("retry-after") == retry_after == as_ollama.headers.get("retry-after")


def test_official_clients_see_429_with_retry_after(gateway: RunningServer) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="oa-429", messages=user())
    assert caught.value.response.headers["retry-after"] == "7"
    assert caught.value.code == "rate_limit_exceeded"
    with pytest.raises(ollama.ResponseError) as refused:
        ollama.Client(host=gateway.url).chat(model="oa-429", messages=user())
    assert refused.value.status_code == 429 and "Rate limit reached" in refused.value.error


@pytest.fixture(scope="module")
def silent_upstream() -> Iterator[ReplayServer]:
    late = Reply("openai/vllm_text.sse", delay_headers=3)
    with replay_server({"late": late, "late-whole": late}) as server:
        yield server


@pytest.fixture(scope="module")
def strict_gateway(silent_upstream: ReplayServer) -> Iterator[RunningServer]:
    closed = f"http://127.0.0.1:{free_port()}"
    config = config_from_yaml(
        f"""\
        models:
          - name: late
            backend: openai
            base_url: {silent_upstream.url}/v1
            first_byte_timeout: 0.3
          - name: late-whole
            backend: openai
            base_url: {silent_upstream.url}/v1
            first_byte_timeout: 0.3
            total_timeout: 0.6
          - name: nowhere
            backend: ollama
            base_url: {closed}
          - name: nowhere-at-all
            backend: openai
            endpoints: [{closed}/v1, {closed}/v2]
        """
    )
    with serve(config) as server:
        yield server


UNANSWERED = [
    # (name, model, stream, status, words that must all appear)
    ("silent upstream, streaming", "late", True, 504, ["late", "/v1", "0.3s (first_byte_timeout)"]),
    # A whole reply comes when it is done: only total_timeout bounds the wait.
    ("silent upstream, whole reply", "late-whole", False, 504, ["late-whole", "/v1", "0.6s (total_timeout)"]),
    ("unreachable upstream", "nowhere", False, 502, ["nowhere", "127.0.0.1:", "unreachable"]),
    ("every endpoint unreachable", "nowhere-at-all", True, 502, ["nowhere-at-all", "/v1:", "/v2:"]),
]


@pytest.mark.parametrize(("name", "model", "stream", "status", "words"), UNANSWERED, ids=[u[0] for u in UNANSWERED])
def test_unanswered_request_names_model_and_endpoint(
    strict_gateway: RunningServer, name: str, model: str, stream: bool, status: int, words: list[str]
) -> None:
    for path in PATHS.values():
        body = {"model": model, "messages": user(), "stream": stream}
        response = httpx.post(strict_gateway.url + path, json=body, timeout=10)
        assert response.status_code == status
        body = response.json()
        message = body["error"]["message"] if path.startswith("/v1") else body["error"]
        assert all(word in message for word in words), message
