"""Upstream keys: sent as configured or forwarded from the client, never logged."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import httpx
import pytest
import structlog

from proxy.logging import configure_logging
from tests.support.replay import ReplayServer, Reply, replay_server
from tests.support.server import RunningServer, config_from_yaml, serve
from tests.upstream.conftest import user

KEY = "sk-test-4f9c2b7e1d0a8c6e5b3a"
CLIENT_TOKEN = "client-token-93ab1c77d2"
ECHOING_401 = json.dumps(
    {"error": {"message": f"Incorrect API key provided: {KEY}.", "type": "invalid_request_error", "code": "invalid_api_key"}}
).encode()


@pytest.fixture(scope="module")
def upstream() -> Iterator[ReplayServer]:
    script = {
        "keyed": Reply("openai/vllm_text.sse"),
        "refused": Reply(body=ECHOING_401, status=401),
        "cut": Reply("openai/vllm_text.sse", abort_after=3),
    }
    with replay_server(script) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(upstream: ReplayServer) -> Iterator[RunningServer]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DRAGOMAN_TEST_UPSTREAM_KEY", KEY)
        config = config_from_yaml(
            f"""\
            models:
              - {{name: keyed, backend: openai, base_url: "{upstream.url}/v1", api_key: "${{DRAGOMAN_TEST_UPSTREAM_KEY}}"}}
              - {{name: refused, backend: openai, base_url: "{upstream.url}/v1", api_key: "${{DRAGOMAN_TEST_UPSTREAM_KEY}}"}}
              - {{name: cut, backend: openai, base_url: "{upstream.url}/v1", api_key: "${{DRAGOMAN_TEST_UPSTREAM_KEY}}"}}
              - name: forwarding
                backend: openai
                base_url: {upstream.url}/v1
                model: keyed
                api_key: ${{DRAGOMAN_TEST_UPSTREAM_KEY}}
                forward_auth: true
              - {{name: forward-only, backend: openai, base_url: "{upstream.url}/v1", model: keyed, forward_auth: true}}
            """
        )
    with serve(config) as server:
        yield server


SENT = [
    # (name, model, the client's Authorization, what the upstream gets)
    ("configured key", "keyed", None, f"Bearer {KEY}"),
    ("configured key, client header ignored", "keyed", f"Bearer {CLIENT_TOKEN}", f"Bearer {KEY}"),
    ("forwarded", "forwarding", f"Bearer {CLIENT_TOKEN}", f"Bearer {CLIENT_TOKEN}"),
    ("nothing to forward: configured key", "forwarding", None, f"Bearer {KEY}"),
    ("nothing to forward, no key", "forward-only", None, None),
]


@pytest.mark.parametrize(("name", "model", "client_auth", "upstream_auth"), SENT, ids=[s[0] for s in SENT])
def test_authorization_sent_upstream(
    gateway: RunningServer, upstream: ReplayServer, name: str, model: str, client_auth: str | None, upstream_auth: str | None
) -> None:
    headers = {"Authorization": client_auth} if client_auth else {}
    before = len(upstream.received)
    response = httpx.post(gateway.url + "/api/chat", json={"model": model, "messages": user(), "stream": False}, headers=headers)
    assert response.status_code == 200
    [received] = upstream.received[before:]
    assert received.headers.get("authorization") == upstream_auth


def test_keys_never_reach_logs_or_clients(
    gateway: RunningServer, upstream: ReplayServer, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    configure_logging("json", "debug")
    caplog.set_level(logging.DEBUG)  # httpx, aiohttp and anything else on stdlib logging
    try:
        bodies = []
        for model in ["keyed", "refused", "cut", "forwarding"]:
            for path in ["/v1/chat/completions", "/api/chat"]:
                body = {"model": model, "messages": user(), "stream": True}
                response = httpx.post(gateway.url + path, json=body, headers={"Authorization": f"Bearer {CLIENT_TOKEN}"})
                bodies.append(response.text)
    finally:
        structlog.reset_defaults()
    logged = capfd.readouterr()
    everything = logged.out + logged.err + caplog.text
    assert '"status": 401' in logged.err  # the access log did run, at debug level, as JSON
    assert any("Incorrect API key provided: ***." in body for body in bodies)
    assert KEY not in everything and CLIENT_TOKEN not in everything
    assert all(KEY not in body for body in bodies)
    # ...and it was really sent: the test would pass vacuously otherwise.
    assert any(r.headers.get("authorization") == f"Bearer {KEY}" for r in upstream.received)
