"""Bounds on the shape of one request, checked before any work: a 400 in the caller's
dialect that names the field and the ``server.limits`` key (issue 9, rows 4, 12, 14).

Each case reproduces the request that hurt the gateway, scaled to run in seconds.
"""

from __future__ import annotations

import json
import re
import socket
import time
from typing import Any

import httpx
import pytest

from tests.conftest import SCRIPTED_CONFIG
from tests.support.server import RunningServer, config_from_yaml, serve

OPENAI, OLLAMA = "/v1/chat/completions", "/api/chat"


def user(text: str = "hi") -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def post(server: RunningServer, path: str, body: dict[str, Any] | bytes) -> httpx.Response:
    if isinstance(body, bytes):
        return httpx.post(server.url + path, content=body, headers={"content-type": "application/json"}, timeout=30)
    if path == OLLAMA:
        body = {"stream": False, **body}
    return httpx.post(server.url + path, json=body, timeout=30)


def error(response: httpx.Response, path: str) -> str:
    body = response.json()
    if path == OLLAMA:
        assert isinstance(body["error"], str)
        return body["error"]
    assert body["error"]["type"] == "invalid_request_error"
    return body["error"]["message"]


def with_stop(path: str, stop: list[str]) -> dict[str, Any]:
    if path == OPENAI:
        return {"model": "scripted", "messages": user(), "stop": stop}
    return {"model": "scripted", "messages": user(), "options": {"num_predict": 8, "stop": stop}}


@pytest.mark.parametrize("path", [OPENAI, OLLAMA])
def test_too_many_stop_strings(scripted_server: RunningServer, path: str) -> None:
    # row 4: a million distinct 11-character strings (scaled to 100,000) cost every
    # active request of the model seconds per token
    stop = [f"s{i:010d}" for i in range(100_000)]
    r = post(scripted_server, path, with_stop(path, stop))
    assert r.status_code == 400
    field = "stop" if path == OPENAI else "options.stop"
    assert error(r, path) == f"{field}: 100000 stop strings; the limit is 16 (server.limits.max_stop)"


@pytest.mark.parametrize("path", [OPENAI, OLLAMA])
def test_a_stop_string_too_long(scripted_server: RunningServer, path: str) -> None:
    r = post(scripted_server, path, with_stop(path, ["ok", "é" * 129]))  # 258 bytes
    assert r.status_code == 400
    assert "stop[1]: a stop string of 258 bytes; the limit is 256 (server.limits.max_stop_bytes)" in error(r, path)
    assert post(scripted_server, path, with_stop(path, ["x" * 256] * 16)).status_code == 200  # at the bounds


@pytest.mark.parametrize("path", [OPENAI, OLLAMA])
def test_prompt_characters_per_message_and_in_total(scripted_server: RunningServer, path: str) -> None:
    one = post(scripted_server, path, {"model": "scripted", "messages": [*user("a"), *user("x" * 2_000_001)]})
    assert one.status_code == 400
    assert error(one, path) == (
        "messages[1].content: 2000001 characters; the limit is 2000000 (server.limits.max_message_chars)"
    )
    many = post(scripted_server, path, {"model": "scripted", "messages": user("y" * 1_900_000) * 5})
    assert many.status_code == 400
    assert error(many, path) == "messages: 9500000 characters in all; the limit is 8000000 (server.limits.max_prompt_chars)"


def nested(levels: int) -> Any:
    value: Any = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


DEEP_FIELDS = [
    # (dialect path, body extra, field named)
    (OPENAI, {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": nested(65)}}},
     "response_format.json_schema.schema"),
    (OLLAMA, {"format": nested(65)}, "format"),
    (OPENAI, {"tools": [{"type": "function", "function": {"name": "f", "parameters": nested(65)}}]},
     "tools[0].function.parameters"),
    (OLLAMA, {"tools": [{"type": "function", "function": {"name": "f", "parameters": nested(65)}}]},
     "tools[0].function.parameters"),
]


@pytest.mark.parametrize(("path", "extra", "field"), DEEP_FIELDS, ids=[f"{p}-{f}" for p, _, f in DEEP_FIELDS])
def test_free_form_json_nested_past_the_limit(scripted_server: RunningServer, path: str, extra: dict[str, Any], field: str) -> None:
    r = post(scripted_server, path, {"model": "scripted", "messages": user(), **extra})
    assert r.status_code == 400
    assert error(r, path) == f"{field}: JSON nested more than 64 levels deep (server.limits.max_json_depth)"


@pytest.mark.parametrize("path", [OPENAI, OLLAMA])
@pytest.mark.parametrize("as_string", [False, True])
def test_tool_call_arguments_nested_past_the_limit(scripted_server: RunningServer, path: str, as_string: bool) -> None:
    arguments: Any = nested(65)
    if as_string or path == OPENAI:
        arguments = json.dumps(arguments) if as_string else arguments
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    messages = [*user(), {"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "user", "content": "go on"}]
    r = post(scripted_server, path, {"model": "scripted", "messages": messages})
    assert r.status_code == 400
    assert "messages[1].tool_calls[0].function.arguments: JSON nested more than 64 levels" in error(r, path)


@pytest.mark.parametrize("path", [OPENAI, OLLAMA])
@pytest.mark.parametrize("where", ["format", "junk"])
def test_a_body_nested_past_the_decoder_is_a_400(scripted_server: RunningServer, path: str, where: str) -> None:
    # row 14: a body nested more than ~1,000 levels was a 500 RecursionError
    body = b'{"model":"scripted","stream":false,"messages":[{"role":"user","content":"hi"}],"%s":%s%s}' % (
        where.encode(), b'{"a":' * 5000, b"}" * 5000)
    r = post(scripted_server, path, body)
    assert r.status_code == 400, r.text
    assert error(r, path) == "request body: JSON nested too deeply to decode; the limit is 64 levels (server.limits.max_json_depth)"


@pytest.mark.parametrize("path", [OPENAI, OLLAMA])
def test_a_string_argument_nested_past_the_decoder(scripted_server: RunningServer, path: str) -> None:
    arguments = "[" * 5000 + "]" * 5000
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a":' + arguments + "}"}}
    messages = [*user(), {"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "user", "content": "go on"}]
    r = post(scripted_server, path, {"model": "scripted", "messages": messages})
    assert r.status_code == 400
    assert "tool_calls[0].function.arguments" in error(r, path) and "nested too deeply" in error(r, path)


MODEL_NAME_PATHS = [
    ("POST", OPENAI), ("POST", OLLAMA), ("POST", "/api/show"), ("GET", "/v1/models/{name}"),
]


@pytest.mark.parametrize(("method", "path"), MODEL_NAME_PATHS)
def test_a_too_long_model_name_is_a_400(scripted_server: RunningServer, method: str, path: str) -> None:
    # row 12: one request naming a 1 MiB model added 48 MB to /metrics
    name = "family-" + "x" * (1 << 20) if method == "POST" else "family-" + "x" * 4000
    if method == "GET":
        r = httpx.get(scripted_server.url + path.format(name=name))
    else:
        r = httpx.post(scripted_server.url + path, json={"model": name, "messages": user(), "stream": False}, timeout=30)
    assert r.status_code == 400, r.text[:200]
    message = r.json()["error"]["message"] if path.startswith("/v1") else r.json()["error"]
    assert message == f"model: the name is {len(name)} characters long; the limit is 256 (server.limits.max_model_name)"
    assert "x" * 300 not in httpx.get(scripted_server.url + "/metrics").text


def series(metrics: str) -> set[str]:
    """The metric series (name and labels) in a scrape, without their values."""
    return {line.rsplit(" ", 1)[0] for line in metrics.splitlines() if line and not line.startswith("#")}


def test_distinct_names_matching_a_glob_are_one_series(scripted_server: RunningServer) -> None:
    # row 12: 3,000 distinct names (scaled to 300) matching a glob grew /metrics from 137 KB to 42 MB
    with httpx.Client(base_url=scripted_server.url) as client:
        client.post(OPENAI, json={"model": "family-first", "messages": user()})
        before = series(client.get("/metrics").text)
        for i in range(300):
            assert client.post(OPENAI, json={"model": f"family-{i}", "messages": user()}).status_code == 200
        after = client.get("/metrics").text
    assert series(after) == before
    assert 'model="family-*"' in after and not re.search(r'model="family-\d', after)


def test_completions_are_bounded_too(scripted_server: RunningServer) -> None:
    long = httpx.post(scripted_server.url + "/api/generate", json={"model": "scripted", "prompt": "x" * 2_000_001, "stream": False})
    assert long.status_code == 400
    assert long.json()["error"] == "prompt: 2000001 characters; the limit is 2000000 (server.limits.max_message_chars)"
    stops = httpx.post(scripted_server.url + "/v1/completions", json={"model": "scripted", "prompt": "hi", "stop": ["a"] * 17})
    assert stops.status_code == 400
    assert stops.json()["error"]["message"] == "stop: 17 stop strings; the limit is 16 (server.limits.max_stop)"
    deep = httpx.post(scripted_server.url + "/api/generate", json={"model": "scripted", "prompt": "hi", "stream": False, "format": nested(65)})
    assert deep.status_code == 400 and deep.json()["error"].startswith("format: JSON nested more than 64 levels deep")


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/chat/completions", {"max_tokens": 3}, "messages"),
        ("/api/chat", {"stream": False}, "messages"),
        ("/v1/messages", {"max_tokens": 3}, "messages"),
        ("/v1/messages/count_tokens", {}, "messages"),
        ("/v1/responses", {}, "input"),
    ],
)
def test_too_many_messages_are_refused_before_they_are_converted(
    scripted_server: RunningServer, path: str, body: dict[str, Any], field: str
) -> None:
    """300k tiny messages fit in the body limit (12 MB) and held the event loop for 2-3 s
    in every dialect (converting, bounding and rendering them), stalling every stream."""
    many = [{"role": "user", "content": "hi"}] * 10_001
    conversation = {"input": many} if path == "/v1/responses" else {"messages": many}
    reply = httpx.post(scripted_server.url + path, json={"model": "scripted", **conversation, **body}, timeout=60)
    assert reply.status_code == 400, reply.text
    assert f"{field}: 10001 messages in one request; the limit is 10000 (server.limits.max_messages)" in reply.text
    at_the_limit = {"input": many[:10_000]} if path == "/v1/responses" else {"messages": many[:10_000]}
    reply = httpx.post(scripted_server.url + path, json={"model": "scripted", **at_the_limit, **body}, timeout=60)
    assert "server.limits.max_messages" not in reply.text


@pytest.mark.parametrize("path", [OPENAI, OLLAMA, "/v1/messages", "/v1/responses"])
def test_a_body_sent_too_slowly_is_a_408_and_others_are_served(path: str) -> None:
    # A client that sent its body a byte at a time kept its connection open for as long
    # as it liked; the size bound alone never ended it.
    config = config_from_yaml(SCRIPTED_CONFIG + "server:\n  limits:\n    body_seconds: 1.5\n")
    body = json.dumps({"model": "scripted", "messages": user(), "max_tokens": 8}).encode()
    with serve(config) as server, socket.create_connection(("127.0.0.1", server.port), timeout=10) as slow:
        head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        slow.sendall(head.encode() + body[:5])
        began = time.monotonic()
        # Meanwhile another client's whole request is answered as usual.
        assert httpx.post(server.url + OPENAI, json={"model": "scripted", "messages": user()}, timeout=10).status_code == 200
        reply = b""
        while b"\r\n\r\n" not in reply or len(reply) < reply.index(b"\r\n\r\n") + 30:
            chunk = slow.recv(65536)
            if not chunk:
                break
            reply += chunk
        waited = time.monotonic() - began
    status_line, _, rest = reply.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 408"), reply[:300]
    assert 1.0 < waited < 8, waited
    assert b"server.limits.body_seconds" in rest


def test_body_seconds_must_be_positive() -> None:
    with pytest.raises(Exception, match="body_seconds"):
        config_from_yaml(SCRIPTED_CONFIG + "server:\n  limits:\n    body_seconds: 0\n")
