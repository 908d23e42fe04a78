"""The client's key, read one way on every route: ``Authorization: Bearer <key>`` or
``x-api-key: <key>`` (as llama-server's and Anthropic's clients send it) both pass the
gateway's key check, and an entry with ``forward_auth`` sends it upstream, whichever
dialect's route the client used."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.replay import ReplayServer, Reply
from tests.support.replay_gateway import replay_gateway
from tests.support.server import RunningServer

KEY = "client-key-5e0b7a1f"
HI = [{"role": "user", "content": "hi"}]

# (route, body): every route that can reach an upstream, in each dialect.
ROUTES: list[tuple[str, dict[str, Any]]] = [
    ("/v1/chat/completions", {"model": "fwd-chat", "messages": HI}),
    ("/v1/messages", {"model": "fwd-chat", "max_tokens": 16, "messages": HI}),
    ("/v1/responses", {"model": "fwd-chat", "input": "hi", "store": False}),
    ("/api/chat", {"model": "fwd-chat", "messages": HI, "stream": False}),
    ("/api/generate", {"model": "fwd-complete", "prompt": "hi", "raw": True, "stream": False}),
    ("/v1/completions", {"model": "fwd-complete", "prompt": "hi"}),
    ("/api/embed", {"model": "fwd-embed", "input": "hi"}),
    ("/api/embeddings", {"model": "fwd-embed", "prompt": "hi"}),
    ("/v1/embeddings", {"model": "fwd-embed", "input": "hi"}),
]
HEADERS = {"x-api-key": {"x-api-key": KEY}, "bearer": {"Authorization": f"Bearer {KEY}"}}


SCRIPT: dict[str, Reply | list[Reply]] = {
    "fwd-chat": Reply("openai/vllm_text.sse", whole="openai/vllm_text.json"),
    "fwd-complete": Reply("openai/vllm_completion.sse", whole="openai/vllm_completion.json"),
    "fwd-embed": Reply("openai/embeddings_one.json"),
    "/v1/models": Reply("openai/models.json"),
}


def gateway_config(upstream: ReplayServer) -> str:
    return f"""\
    server:
      api_keys: "{KEY}"
    models:
      - {{name: "fwd-*", backend: openai, base_url: "{upstream.url}/v1", forward_auth: true}}
    """


upstream, gateway = replay_gateway(SCRIPT, gateway_config)


@pytest.mark.parametrize("sent", sorted(HEADERS))
@pytest.mark.parametrize(("path", "body"), ROUTES, ids=[r[0] for r in ROUTES])
def test_the_clients_key_is_accepted_and_forwarded(
    gateway: RunningServer, upstream: ReplayServer, path: str, body: dict[str, Any], sent: str
) -> None:
    before = len(upstream.received)
    reply = httpx.post(gateway.url + path, json=body, headers=HEADERS[sent], timeout=30)
    assert reply.status_code == 200, reply.text
    [received] = upstream.received[before:]
    assert received.headers.get("authorization") == f"Bearer {KEY}"


@pytest.mark.parametrize(("path", "body"), ROUTES[:4], ids=[r[0] for r in ROUTES[:4]])
def test_a_wrong_key_in_either_header_is_refused(gateway: RunningServer, path: str, body: dict[str, Any]) -> None:
    for headers in ({"x-api-key": "wrong"}, {"Authorization": "Bearer wrong"}):
        reply = httpx.post(gateway.url + path, json=body, headers=headers, timeout=30)
        assert reply.status_code == 401 and "invalid API key" in reply.text
