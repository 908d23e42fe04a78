"""Request bodies are decoded strictly in every dialect (dragoman/proxy/strict_body.py): a string
where a number is expected, or a number where a boolean is, is a 400 in the caller's
dialect naming the field — as OpenAI and Ollama (Go's encoding/json) answer — never
quietly converted (``"max_tokens": "5"`` was taken as 5). What strict decoding still
takes: an integer for a float, ``null`` for an optional field, and (Ollama's options
only, as Ollama reads them) a whole-number float for an integer option, which Home
Assistant sends. Over real HTTP against the scripted backend."""

from __future__ import annotations

from typing import Any

import httpx
import msgspec
import ollama
import openai
import pytest

from tests.support.server import RunningServer

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
RESPONSES = "/v1/responses"
EMBEDDINGS = "/v1/embeddings"
MESSAGES = "/v1/messages"
COUNT = "/v1/messages/count_tokens"
OLLAMA_CHAT = "/api/chat"
GENERATE = "/api/generate"
EMBED = "/api/embed"
LEGACY_EMBED = "/api/embeddings"

USER = [{"role": "user", "content": "hi"}]
BODIES: dict[str, dict[str, Any]] = {
    CHAT: {"model": "scripted", "messages": USER},
    COMPLETIONS: {"model": "scripted", "prompt": "hi"},
    RESPONSES: {"model": "scripted", "input": "hi"},
    EMBEDDINGS: {"model": "scripted", "input": "hi"},
    MESSAGES: {"model": "scripted", "max_tokens": 8, "messages": USER},
    COUNT: {"model": "scripted", "messages": USER},
    OLLAMA_CHAT: {"model": "scripted", "messages": USER, "stream": False},
    GENERATE: {"model": "scripted", "prompt": "hi", "stream": False},
    EMBED: {"model": "scripted", "input": "hi"},
    LEGACY_EMBED: {"model": "scripted", "prompt": "hi"},
}

REFUSED = [
    # (path, fields merged into the body, the field the error names)
    (CHAT, {"max_tokens": "5"}, "max_tokens"),
    (CHAT, {"max_tokens": 5.0}, "max_tokens"),
    (CHAT, {"max_tokens": -1}, "max_tokens"),  # was taken as "until the context is full"
    (CHAT, {"max_completion_tokens": -5}, "max_completion_tokens"),
    (CHAT, {"temperature": "0.5"}, "temperature"),
    (CHAT, {"stream": 1}, "stream"),
    (CHAT, {"stream": "true"}, "stream"),
    (CHAT, {"logprobs": "false"}, "logprobs"),
    (CHAT, {"seed": "7"}, "seed"),
    (COMPLETIONS, {"max_tokens": "5"}, "max_tokens"),
    (COMPLETIONS, {"echo": 1}, "echo"),
    (RESPONSES, {"max_output_tokens": "5"}, "max_output_tokens"),
    (RESPONSES, {"temperature": "1"}, "temperature"),
    (RESPONSES, {"store": "false"}, "store"),
    (EMBEDDINGS, {"dimensions": "8"}, "dimensions"),
    (MESSAGES, {"max_tokens": "5"}, "max_tokens"),
    (MESSAGES, {"stream": 0}, "stream"),
    (MESSAGES, {"top_k": "3"}, "top_k"),
    (COUNT, {"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    (OLLAMA_CHAT, {"options": {"num_predict": "5"}}, "options.num_predict"),
    (OLLAMA_CHAT, {"options": {"temperature": "0.5"}}, "options.temperature"),
    (OLLAMA_CHAT, {"options": {"num_ctx": 2048.5}}, "options.num_ctx"),
    (OLLAMA_CHAT, {"stream": "false"}, "stream"),
    (OLLAMA_CHAT, {"top_logprobs": 2.0}, "top_logprobs"),
    (OLLAMA_CHAT, {"options": {"mirostat": 3}}, "options.mirostat"),
    (OLLAMA_CHAT, {"options": {"mirostat": 1.5}}, "options.mirostat"),
    (GENERATE, {"raw": "true"}, "raw"),
    (GENERATE, {"options": {"seed": "1"}}, "options.seed"),
    (EMBED, {"truncate": 1}, "truncate"),
    (EMBED, {"dimensions": "8"}, "dimensions"),
    (LEGACY_EMBED, {"options": {"num_ctx": "512"}}, "options.num_ctx"),
]

ACCEPTED = [
    (CHAT, {"temperature": 1, "max_tokens": 5}),
    (CHAT, {"temperature": None, "max_tokens": None, "stop": None, "seed": None}),
    (CHAT, {"stream": False, "logprobs": False}),
    (CHAT, {"stream": None}),  # nullable in OpenAI's spec, so for these three routes too
    (COMPLETIONS, {"stream": None, "echo": None}),
    (RESPONSES, {"stream": None}),
    (COMPLETIONS, {"temperature": 0, "max_tokens": 4}),
    (RESPONSES, {"temperature": 1, "max_output_tokens": 16}),
    (MESSAGES, {"temperature": 1, "top_k": 3}),
    (OLLAMA_CHAT, {"options": {"temperature": 1, "top_p": 1, "num_predict": 5}}),
    (OLLAMA_CHAT, {"options": {"num_ctx": 8192.0, "seed": 3.0}, "keep_alive": "300s"}),
    (OLLAMA_CHAT, {"keep_alive": -1, "think": None}),
    (GENERATE, {"options": {"num_predict": 4.0}, "keep_alive": 0}),
    (GENERATE, {"options": {"mirostat": 2.0, "top_k": 40.0}}),  # mirostat is an integer option too
]


def post(server: RunningServer, path: str, extra: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.url + path, json={**BODIES[path], **extra}, timeout=30)


def named_field(path: str, response: httpx.Response) -> str:
    """The error's message, checked to be in the caller's dialect."""
    body = response.json()
    if path.startswith("/api/"):
        assert set(body) == {"error"}
        return body["error"]
    if path.startswith(MESSAGES):
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        return body["error"]["message"]
    assert body["error"]["type"] == "invalid_request_error"
    return body["error"]["message"]


@pytest.mark.parametrize(("path", "extra", "field"), REFUSED, ids=[f"{p}-{f}" for p, _, f in REFUSED])
def test_a_wrong_type_is_a_400_naming_the_field(
    scripted_server: RunningServer, path: str, extra: dict[str, Any], field: str
) -> None:
    response = post(scripted_server, path, extra)
    assert response.status_code == 400, response.text
    message = named_field(path, response)
    assert message.startswith(f"{field}: "), message
    if path in (CHAT, COMPLETIONS, RESPONSES, EMBEDDINGS):
        assert response.json()["error"]["param"] == field


@pytest.mark.parametrize(("path", "extra"), ACCEPTED, ids=[f"{p}-{sorted(e)}" for p, e in ACCEPTED])
def test_what_strict_decoding_still_accepts(scripted_server: RunningServer, path: str, extra: dict[str, Any]) -> None:
    response = post(scripted_server, path, extra)
    assert response.status_code == 200, response.text


def test_a_whole_number_option_reaches_the_backend_as_an_integer(scripted_server: RunningServer) -> None:
    """Home Assistant's shape through the official client: ``num_predict: 4.0``."""
    from tests.support.scripted import ScriptedBackend

    client = ollama.Client(host=scripted_server.url)
    client.chat(model="scripted", messages=USER, options={"num_predict": 4.0, "num_ctx": 8192.0})
    sent = ScriptedBackend.last_request
    assert sent is not None and (sent.options.num_predict, sent.options.num_ctx) == (4, 8192)
    assert type(sent.options.num_predict) is int and type(sent.options.num_ctx) is int


def test_the_official_clients_see_the_400(scripted_server: RunningServer) -> None:
    oa = openai.OpenAI(base_url=scripted_server.url + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError) as raised:
        oa.chat.completions.create(model="scripted", messages=USER, max_tokens="5")  # type: ignore[arg-type]
    assert "max_tokens" in str(raised.value)
    # (anthropic's SDK does arithmetic on max_tokens before it sends: the table's rows cover Messages)
    ol = ollama.Client(host=scripted_server.url)
    with pytest.raises(ollama.ResponseError) as failed:
        ol.chat(model="scripted", messages=USER, options={"num_predict": "5"})  # type: ignore[dict-item]
    assert failed.value.status_code == 400 and "options.num_predict" in failed.value.error


def test_ollama_null_fields_mean_left_out_over_http(scripted_server: RunningServer) -> None:
    """Clients built on raw JSON send ``null`` for what they leave unset; Ollama's Go
    server reads it as the field left out (tests/adapters/test_ollama_nulls.py has the
    table): ``stream: null`` streams NDJSON, ``messages: null`` loads the model."""
    nulls = {"format": None, "tools": None, "keep_alive": None, "think": None, "options": None, "logprobs": None,
             "top_logprobs": None}
    with httpx.stream("POST", scripted_server.url + OLLAMA_CHAT, timeout=30,
                      json={"model": "scripted", "messages": [{"role": "user", "content": "hi", "images": None,
                                                               "tool_calls": None}], "stream": None, **nulls}) as reply:
        assert reply.status_code == 200 and reply.headers["content-type"] == "application/x-ndjson"
        lines = [msgspec.json.decode(line) for line in reply.iter_lines() if line]
    assert len(lines) > 1 and lines[-1]["done"] is True and not any("error" in line for line in lines)
    loaded = httpx.post(scripted_server.url + OLLAMA_CHAT, json={"model": "scripted", "messages": None, "stream": False},
                        timeout=30)
    assert loaded.status_code == 200 and loaded.json()["done_reason"] == "load", loaded.text
    generated = httpx.post(scripted_server.url + GENERATE, timeout=30, json={
        "model": "scripted", "prompt": "hi", "stream": False, "suffix": None, "system": None, "template": None,
        "raw": None, "context": None, "images": None, **nulls})
    assert generated.status_code == 200 and generated.json()["done"] is True, generated.text
    shown = httpx.post(scripted_server.url + "/api/show", json={"model": "scripted", "verbose": None}, timeout=30)
    assert shown.status_code == 200, shown.text
    # a wrong type is still the 400 naming the field
    refused = httpx.post(scripted_server.url + OLLAMA_CHAT, json={"model": "scripted", "stream": "no"}, timeout=30)
    assert refused.status_code == 400 and refused.json()["error"].startswith("stream: ")
