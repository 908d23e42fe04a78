"""Completions through upstreams of both dialects, against recorded replies of the exact
shapes Ollama (``/api/generate``) and vLLM (``/v1/completions``) send: every client
dialect × upstream dialect pair, streaming and not, and what each upstream receives.

Which upstream endpoint each kind of completion uses:

| completion | OpenAI-compatible upstream | Ollama upstream |
|---|---|---|
| templated (``/api/generate`` without ``raw``/``suffix``) | ``/v1/chat/completions`` (the chat it means) | ``/api/generate`` |
| raw (``raw: true``; every ``/v1/completions`` prompt) | ``/v1/completions`` | ``/api/generate`` ``raw: true`` |
| fill-in-the-middle (``suffix``) | ``/v1/completions`` with ``suffix`` | ``/api/generate`` ``raw: false`` + ``suffix`` |
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import ollama
import openai
import pytest

from tests.support.replay import ReplayServer
from tests.support.server import RunningServer, config_from_yaml, serve


@pytest.fixture(scope="module")
def gateway(openai_upstream: ReplayServer, ollama_upstream: ReplayServer) -> Iterator[RunningServer]:
    config = config_from_yaml(
        f"""\
        models:
          - {{name: "oa-*", backend: openai, base_url: "{openai_upstream.url}/v1"}}
          - {{name: "ol-*", backend: ollama, base_url: "{ollama_upstream.url}"}}
        """
    )
    with serve(config) as server:
        yield server


def last(upstream: ReplayServer, before: int) -> Any:
    [received] = upstream.received[before:]
    return received


def ndjson(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.headers["content-type"] == "application/x-ndjson"
    return [json.loads(line) for line in response.text.splitlines()]


STREAMS = pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])


# -- an Ollama client's /api/generate -----------------------------------------------------------


@STREAMS
def test_raw_generate_through_an_ollama_upstream(gateway: RunningServer, ollama_upstream: ReplayServer, stream: bool) -> None:
    before = len(ollama_upstream.received)
    body = {"model": "ol-generate-raw", "prompt": "<|fim_prefix|>def add(a, b):\n    return ", "raw": True,
            "stream": stream, "options": {"num_predict": 8}}  # fmt: skip
    reply = httpx.post(gateway.url + "/api/generate", json=body, timeout=10)
    assert reply.status_code == 200, reply.text
    received = last(ollama_upstream, before)
    assert received.path == "/api/generate"
    assert received.json() == {**body, "options": {"num_predict": 8}}  # only what was sent, model name kept
    lines = ndjson(reply) if stream else [reply.json()]
    assert "".join(line["response"] for line in lines) == "a + b\n"
    assert lines[-1]["done"] and lines[-1]["eval_count"] == 4 and lines[-1]["prompt_eval_count"] == 17
    assert "context" not in lines[-1]  # Ollama sends none in raw mode, and nothing is made up


@STREAMS
def test_templated_generate_through_an_ollama_upstream(gateway: RunningServer, ollama_upstream: ReplayServer, stream: bool) -> None:
    before = len(ollama_upstream.received)
    body = {"model": "ol-generate-text", "prompt": "Capital of France?", "system": "Be brief.", "stream": stream,
            "logprobs": True, "top_logprobs": 2, "think": True}  # fmt: skip
    reply = httpx.post(gateway.url + "/api/generate", json=body, timeout=10)
    assert reply.status_code == 200, reply.text
    assert last(ollama_upstream, before).json() == body
    lines = ndjson(reply) if stream else [reply.json()]
    assert "".join(line["response"] for line in lines) == "Paris."
    assert "".join(line.get("thinking", "") for line in lines) == "Capital of France."
    assert [t["token"] for line in lines for t in line.get("logprobs", [])] == ["Paris", "."]
    if stream:  # each line's logprobs are those of its own text
        assert all("".join(t["token"] for t in line["logprobs"]) == line["response"] for line in lines if "logprobs" in line)
    assert lines[-1]["done_reason"] == "length"
    # The final line's token memory, as the upstream sent it (issue 27).
    assert lines[-1]["context"][:3] == [151644, 872, 198] and len(lines[-1]["context"]) == 17
    assert all("context" not in line for line in lines[:-1])


def test_context_goes_back_to_an_ollama_upstream(gateway: RunningServer, ollama_upstream: ReplayServer) -> None:
    """The official client reads the upstream's context and sends it back as it was."""
    client = ollama.Client(host=gateway.url)
    first = client.generate(model="ol-generate-text", prompt="Capital of France?")
    assert first.context is not None and len(first.context) == 17
    before = len(ollama_upstream.received)
    client.generate(model="ol-generate-text", prompt="And of Spain?", context=first.context)
    assert last(ollama_upstream, before).json()["context"] == list(first.context)


def test_context_cannot_go_to_an_openai_upstream(gateway: RunningServer) -> None:
    body = {"model": "oa-chat", "prompt": "And of Spain?", "context": [1, 2, 3], "stream": False}
    reply = httpx.post(gateway.url + "/api/generate", json=body, timeout=10)
    assert reply.status_code == 400 and "context" in reply.json()["error"], reply.text


def test_logit_bias_is_refused_by_name_for_an_ollama_upstream(gateway: RunningServer) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="ol-generate-text", messages=[{"role": "user", "content": "hi"}], logit_bias={"5": -100})
    assert info.value.body["param"] == "logit_bias" and "cannot bias token ids" in info.value.body["message"]  # type: ignore[index]


def test_a_suffix_reaches_an_ollama_upstream_without_raw(gateway: RunningServer, ollama_upstream: ReplayServer) -> None:
    """Ollama renders a suffix only through its template, and drops it in raw mode."""
    before = len(ollama_upstream.received)
    client = ollama.Client(host=gateway.url)
    reply = client.generate(model="ol-generate-raw", prompt="def add(a, b):\n    return ", suffix="\n", raw=True)
    assert reply.response == "a + b\n"
    sent = last(ollama_upstream, before).json()
    assert (sent["suffix"], sent.get("raw", False)) == ("\n", False)


def test_an_ollama_upstream_without_insert_is_its_own_400(gateway: RunningServer) -> None:
    reply = httpx.post(gateway.url + "/api/generate", json={"model": "ol-no-insert", "prompt": "x", "suffix": "y"}, timeout=10)
    assert reply.status_code == 400 and reply.json() == {"error": "registry.ollama.ai/library/qwen3:0.6b does not support insert"}


@STREAMS
def test_raw_generate_through_an_openai_upstream(gateway: RunningServer, openai_upstream: ReplayServer, stream: bool) -> None:
    before = len(openai_upstream.received)
    body = {"model": "oa-completion", "prompt": "def add(a, b):\n    return ", "raw": True, "stream": stream,
            "options": {"temperature": 0, "stop": ["\n\n"]}}  # fmt: skip
    reply = httpx.post(gateway.url + "/api/generate", json=body, timeout=10)
    assert reply.status_code == 200, reply.text
    received = last(openai_upstream, before)
    assert received.path == "/v1/completions"
    expected = {"model": "oa-completion", "prompt": body["prompt"], "temperature": 0, "stop": ["\n\n"], "max_tokens": None,
                "stream": stream} | ({"stream_options": {"include_usage": True}} if stream else {})  # fmt: skip
    assert received.json() == expected
    lines = ndjson(reply) if stream else [reply.json()]
    assert "".join(line["response"] for line in lines) == "a + b\n"
    assert (lines[-1]["prompt_eval_count"], lines[-1]["eval_count"], lines[-1]["done_reason"]) == (17, 4, "stop")


@STREAMS
def test_templated_generate_through_an_openai_upstream_is_a_chat(
    gateway: RunningServer, openai_upstream: ReplayServer, stream: bool
) -> None:
    before = len(openai_upstream.received)
    body = {"model": "oa-text", "prompt": "Hi", "system": "Be kind.", "stream": stream}
    reply = httpx.post(gateway.url + "/api/generate", json=body, timeout=10)
    assert reply.status_code == 200, reply.text
    received = last(openai_upstream, before)
    assert received.path == "/v1/chat/completions"
    assert received.json()["messages"] == [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"}]
    lines = ndjson(reply) if stream else [reply.json()]
    assert "".join(line["response"] for line in lines) == "Hello! How can I help you today?"


def test_a_suffix_reaches_an_openai_upstream(gateway: RunningServer, openai_upstream: ReplayServer) -> None:
    before = len(openai_upstream.received)
    reply = httpx.post(gateway.url + "/api/generate", json={"model": "oa-completion", "prompt": "a", "suffix": "b", "stream": False}, timeout=10)
    assert reply.status_code == 200
    sent = last(openai_upstream, before).json()
    assert (sent["prompt"], sent["suffix"]) == ("a", "b")


def test_an_openai_upstream_that_refuses_a_suffix_says_so(gateway: RunningServer) -> None:
    """vLLM answers 400 "suffix is not currently supported": it reaches the client as is."""
    reply = httpx.post(gateway.url + "/api/generate", json={"model": "oa-no-suffix", "prompt": "a", "suffix": "b"}, timeout=10)
    assert reply.status_code == 400 and reply.json() == {"error": "suffix is not currently supported"}


def test_images_with_a_raw_prompt_cannot_go_to_an_openai_completions_endpoint(gateway: RunningServer) -> None:
    body = {"model": "oa-completion", "prompt": "x", "raw": True, "images": ["iVBORw0KGgo="]}
    reply = httpx.post(gateway.url + "/api/generate", json=body, timeout=10)
    assert reply.status_code == 400 and reply.json()["error"].startswith("images: an OpenAI-compatible /v1/completions")


# -- an OpenAI client's /v1/completions -----------------------------------------------------------


@STREAMS
def test_completions_through_an_openai_upstream(gateway: RunningServer, openai_upstream: ReplayServer, stream: bool) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0)
    before = len(openai_upstream.received)
    kwargs: dict[str, Any] = {"model": "oa-completion-logprobs", "prompt": "The capital of France is", "max_tokens": 2, "logprobs": 2}
    if stream:
        chunks = list(client.completions.create(**kwargs, stream=True))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        tokens = [t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.tokens]
        offsets = [o for c in chunks if c.choices and c.choices[0].logprobs for o in c.choices[0].logprobs.text_offset]
        finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
    else:
        reply = client.completions.create(**kwargs)
        text, finish = reply.choices[0].text, reply.choices[0].finish_reason
        tokens, offsets = reply.choices[0].logprobs.tokens, reply.choices[0].logprobs.text_offset
        assert reply.usage.prompt_tokens == 7 and reply.usage.completion_tokens == 2
        assert reply.choices[0].logprobs.top_logprobs == [{" Paris": -0.3125, " the": -1.875}, {".": -0.5, ",": -1.25}]
    assert (text, tokens, offsets, finish) == (" Paris.", [" Paris", "."], [0, 6], "length")
    sent = last(openai_upstream, before)
    assert sent.path == "/v1/completions"
    assert {k: sent.json()[k] for k in ("prompt", "max_tokens", "logprobs")} == {"prompt": "The capital of France is", "max_tokens": 2, "logprobs": 2}


@STREAMS
def test_completions_through_an_ollama_upstream(gateway: RunningServer, ollama_upstream: ReplayServer, stream: bool) -> None:
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0)
    before = len(ollama_upstream.received)
    if stream:
        chunks = list(client.completions.create(model="ol-generate-raw", prompt="def add(a, b):", max_tokens=8, stream=True,
                                                 stream_options={"include_usage": True}))  # fmt: skip
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        usage = chunks[-1].usage
    else:
        reply = client.completions.create(model="ol-generate-raw", prompt="def add(a, b):", max_tokens=8)
        text, usage = reply.choices[0].text, reply.usage
    assert text == "a + b\n" and (usage.prompt_tokens, usage.completion_tokens) == (17, 4)
    sent = last(ollama_upstream, before)
    assert sent.path == "/api/generate"
    assert sent.json() == {"model": "ol-generate-raw", "prompt": "def add(a, b):", "raw": True, "stream": stream,
                           "options": {"num_predict": 8}}  # fmt: skip
