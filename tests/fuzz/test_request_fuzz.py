"""Request decoders under arbitrary and almost-right bodies.

Over HTTP (a real server with the scripted backend): never a 5xx, never a traceback, a
4xx always in the caller's error shape, a 200 always a whole, well-formed reply. On the
pure path: decoding and ``to_canonical`` either succeed or raise
``msgspec.ValidationError`` / ``RequestError`` — nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import msgspec
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from adapters import ollama, openai
from adapters.errors import RequestError
from tests.fuzz.strategies import bodies, json_values, served_bodies
from tests.fuzz.frames import ndjson_lines, sse_payloads
from tests.support.server import RunningServer

HTTP_FUZZ = settings(
    max_examples=120, deadline=None, database=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
PURE_FUZZ = settings(max_examples=300, deadline=None, database=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])

JSON = {"Content-Type": "application/json"}
REPLY_TEXT = "Hello, world"  # what the scripted backend says to anything but a script name


@pytest.fixture(scope="module")
def client(scripted_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=scripted_server.url, timeout=10) as http:
        yield http


raw_bodies = st.one_of(
    st.binary(max_size=30),
    st.sampled_from([b"", b"{", b"[]", b"null", b'{"model": NaN}', b'{"model": "scripted", "temperature": Infinity}',
                     b"\xef\xbb\xbf{}", b'{"model": "scripted", "messages": [{"role": "user", "content": "\\ud800"}]}']),
)


def check_openai_reply(response: httpx.Response) -> None:
    status, text = response.status_code, response.text
    event(f"status {status}")  # shown by --hypothesis-show-statistics: is the 200 path reached?
    assert status < 500, text
    assert "Traceback" not in text and 'File "' not in text
    if status >= 400:
        body = response.json()
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
        assert isinstance(body["error"]["message"], str) and body["error"]["message"]
        return
    assert status == 200
    if response.headers["content-type"].startswith("text/event-stream"):
        payloads = sse_payloads(response.content)
        assert not any("error" in p for p in payloads), payloads
        content = "".join(p["choices"][0]["delta"].get("content") or "" for p in payloads if p["choices"])
    else:
        content = response.json()["choices"][0]["message"]["content"]
    assert content == REPLY_TEXT


def check_ollama_reply(response: httpx.Response) -> None:
    status, text = response.status_code, response.text
    event(f"status {status}")
    assert status < 500, text
    assert "Traceback" not in text and 'File "' not in text
    if status >= 400:
        body = response.json()
        assert set(body) == {"error"} and isinstance(body["error"], str) and body["error"], body
        return
    assert status == 200
    lines = ndjson_lines(response.content) if "ndjson" in response.headers["content-type"] else [response.json()]
    assert not any("error" in line for line in lines), lines
    assert lines[-1]["done"] is True and all(not line["done"] for line in lines[:-1])
    if lines[-1]["done_reason"] not in ("load", "unload"):  # empty messages: a load request
        assert "".join(line["message"]["content"] for line in lines) == REPLY_TEXT


ROUTES = [
    ("openai", "/v1/chat/completions", openai.ChatCompletionRequest, check_openai_reply),
    ("ollama", "/api/chat", ollama.ChatRequest, check_ollama_reply),
]
BODY_KINDS = [("well-typed, served model", served_bodies), ("anything", bodies)]


@pytest.mark.parametrize(("kind", "strategy"), BODY_KINDS, ids=[k[0] for k in BODY_KINDS])
@pytest.mark.parametrize(("dialect", "path", "wire_type", "check"), ROUTES, ids=[r[0] for r in ROUTES])
def test_chat_route_answers_any_body_cleanly(
    client: httpx.Client, dialect: str, path: str, wire_type: type, check: Any, kind: str, strategy: Any
) -> None:
    @HTTP_FUZZ
    @given(body=strategy(wire_type))
    def post(body: Any) -> None:
        check(client.post(path, content=msgspec.json.encode(body), headers=JSON))

    post()


@settings(HTTP_FUZZ, max_examples=40)
@given(raw=st.one_of(raw_bodies, json_values.map(lambda v: json.dumps(v).encode())))
def test_routes_answer_bytes_that_are_not_json_cleanly(client: httpx.Client, raw: bytes) -> None:
    check_openai_reply(client.post("/v1/chat/completions", content=raw, headers=JSON))
    check_ollama_reply(client.post("/api/chat", content=raw, headers=JSON))


# -- the pure path ----------------------------------------------------------------------------

DECODE_PATHS = [
    ("openai", openai.ChatCompletionRequest, openai.to_canonical),
    ("ollama", ollama.ChatRequest, ollama.to_canonical),
]


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "lax as Litestar decodes"])
@pytest.mark.parametrize(("dialect", "wire_type", "to_canonical"), DECODE_PATHS, ids=[p[0] for p in DECODE_PATHS])
def test_decoders_raise_only_their_own_errors(dialect: str, wire_type: type, to_canonical: Any, strict: bool) -> None:
    @PURE_FUZZ
    @given(body=bodies(wire_type))
    def decode(body: Any) -> None:
        try:
            to_canonical(msgspec.convert(body, wire_type, strict=strict))
        except (msgspec.ValidationError, RequestError):
            pass

    decode()
