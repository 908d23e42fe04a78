"""Request decoders under arbitrary and almost-right bodies.

Over HTTP (a real server with the scripted backend): never a 5xx, never a traceback, a
4xx always in the caller's error shape, a 200 always a whole, well-formed reply. On the
pure path: decoding and ``to_canonical`` either succeed or raise
``msgspec.ValidationError`` / ``RequestError`` — nothing else — and what they accept a
backend worker can carry and an upstream of either dialect accepts in turn.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import httpx
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dragoman.adapters import ollama, openai
from dragoman.adapters.canonical import SamplingOptions
from dragoman.adapters.errors import RequestError
from tests.fuzz.replies import check_ollama_reply, check_openai_reply
from tests.fuzz.strategies import bodies, json_values, served_bodies
from tests.support.scripted import ScriptedBackend
from tests.support.server import RunningServer

HTTP_FUZZ = settings(
    max_examples=120, deadline=None, database=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
PURE_FUZZ = settings(max_examples=200, deadline=None, database=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])

JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def client(scripted_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=scripted_server.url, timeout=10) as http:
        yield http


raw_bodies = st.one_of(
    st.binary(max_size=30),
    st.sampled_from([b"", b"{", b"[]", b"null", b'{"model": NaN}', b'{"model": "scripted", "temperature": Infinity}',
                     b"\xef\xbb\xbf{}", b'{"model": "scripted", "messages": [{"role": "user", "content": "\\ud800"}]}']),
)


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
def test_routes_answer_raw_bytes_cleanly(client: httpx.Client, raw: bytes) -> None:
    check_openai_reply(client.post("/v1/chat/completions", content=raw, headers=JSON))
    check_ollama_reply(client.post("/api/chat", content=raw, headers=JSON))


# -- the pure path ----------------------------------------------------------------------------

DECODE_PATHS = [
    ("openai", openai.ChatCompletionRequest, openai.to_canonical),
    ("ollama", ollama.ChatRequest, ollama.to_canonical),
]


def beyond_openai_penalties(options: SamplingOptions) -> bool:
    """Ollama takes any penalty, OpenAI only -2..2: a real difference between the two
    APIs, which an OpenAI upstream reports itself (its 400 passes through)."""
    return any(p is not None and abs(p) > 2 for p in (options.frequency_penalty, options.presence_penalty))


def beyond_openai_roles(request: Any) -> bool:
    """Ollama leaves any role to the template; OpenAI's API has five (vLLM takes any,
    OpenAI refuses the others with its own 400, which passes through)."""
    return any(m.role not in ("system", "user", "assistant", "tool") for m in request.messages)


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "lax as Litestar decodes"])
@pytest.mark.parametrize(("dialect", "wire_type", "to_canonical"), DECODE_PATHS, ids=[p[0] for p in DECODE_PATHS])
def test_decoders_refuse_cleanly_and_accept_only_what_backends_take(dialect: str, wire_type: type, to_canonical: Any, strict: bool) -> None:
    @PURE_FUZZ
    @given(body=st.one_of(bodies(wire_type), served_bodies(wire_type)))
    def decode(body: Any) -> None:
        try:
            request = to_canonical(msgspec.convert(body, wire_type, strict=strict))
        except (msgspec.ValidationError, RequestError):
            return
        # Typed knobs go to a backend worker over msgpack (64-bit integers only) and
        # keep_alive becomes an unload timer: both must be representable.
        msgspec.msgpack.encode(request.options)
        if request.keep_alive is not None and request.keep_alive >= 0:
            dt.timedelta(seconds=request.keep_alive)
        # An upstream of either dialect accepts what the client got accepted, so a request
        # means the same whichever backend answers it.
        ollama.to_canonical(msgspec.json.decode(ollama.to_upstream(request, "m"), type=ollama.ChatRequest))
        # An Ollama request without messages is a load (dragoman/proxy/ollama_routes.py), never sent
        # as a chat; OpenAI refuses an empty conversation.
        if request.messages and not beyond_openai_penalties(request.options) and not beyond_openai_roles(request):
            sent, _ = openai.to_upstream(request, "m", extra_options=True)
            openai.to_canonical(msgspec.json.decode(sent, type=openai.ChatCompletionRequest))

    decode()


# -- regressions the fuzzing found ----------------------------------------------------------------


def hi(**fields: Any) -> dict[str, Any]:
    return {"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "stream": False, **fields}


# Accepted before, then a 500 in a backend (msgpack takes 64-bit integers only; log of a
# negative min_p) or, through an Ollama upstream, a 400 naming a field the client never sent.
OUT_OF_RANGE = [
    ("seed past 64 bits", "/v1/chat/completions", hi(seed=2**64), "seed"),
    ("max_tokens past 64 bits", "/v1/chat/completions", hi(max_tokens=-(2**63) - 1), "max_tokens"),
    ("top_k negative", "/v1/chat/completions", hi(top_k=-1), "top_k"),
    ("min_p below 0", "/v1/chat/completions", hi(min_p=-1.0), "min_p"),
    ("min_p above 1", "/v1/chat/completions", hi(min_p=1.5), "min_p"),
    ("options.seed past 64 bits", "/api/chat", hi(options={"seed": 2**64}), "options.seed"),
    ("options.num_ctx past 64 bits", "/api/chat", hi(options={"num_ctx": 10**30}), "options.num_ctx"),
    ("options.repeat_last_n past 64 bits", "/api/chat", hi(options={"repeat_last_n": 10**30}), "options.repeat_last_n"),
    ("options.top_k past 64 bits", "/api/chat", hi(options={"top_k": 2**63}), "options.top_k"),
]


@pytest.mark.parametrize(("name", "path", "body", "field"), OUT_OF_RANGE, ids=[c[0] for c in OUT_OF_RANGE])
def test_out_of_range_numbers_are_400_naming_the_field(
    client: httpx.Client, name: str, path: str, body: dict[str, Any], field: str
) -> None:
    response = client.post(path, content=msgspec.json.encode(body), headers=JSON)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    message = error if isinstance(error, str) else error["message"]
    assert message.startswith(f"{field}: "), message


# A keep_alive no clock can schedule (timedelta overflowed: a 500) means forever.
FOREVER = [
    ("seconds past a century", "/api/chat", hi(keep_alive=1e300)),
    ("the largest 64-bit integer", "/api/chat", hi(keep_alive=2**63 - 1)),
    ("a duration string in hours", "/api/chat", hi(keep_alive="99999999999h")),
    ("openai extension field", "/v1/chat/completions", hi(keep_alive=1e300)),
]


@pytest.mark.parametrize(("name", "path", "body"), FOREVER, ids=[c[0] for c in FOREVER])
def test_endless_keep_alive_means_forever(client: httpx.Client, name: str, path: str, body: dict[str, Any]) -> None:
    assert client.post(path, content=msgspec.json.encode(body), headers=JSON).status_code == 200
    assert ScriptedBackend.last_request is not None and ScriptedBackend.last_request.keep_alive == -1.0
