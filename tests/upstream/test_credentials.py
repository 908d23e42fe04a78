"""Upstream keys: sent as configured or forwarded from the client, never logged."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator

import httpx
import pytest
import structlog

from dragoman.config import ConfigError
from dragoman.proxy.logging import configure_logging
from tests.support.replay import ReplayServer, Reply, replay_server
from tests.support.server import RunningServer, config_from_yaml, serve
from tests.upstream.conftest import user

KEY = "sk-test-4f9c2b7e1d0a8c6e5b3a"
CLIENT_TOKEN = "client-token-93ab1c77d2"
ECHOING_401 = json.dumps(
    {"error": {"message": f"Incorrect API key provided: {KEY}.", "type": "invalid_request_error", "code": "invalid_api_key"}}
).encode()
USER, PASSWORD = "gateway", "p@ss:w0rd-7d1e"  # written percent-encoded in the URL
URL_CREDENTIALS = "gateway:p%40ss%3Aw0rd-7d1e"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


def echoing(secret: str, status: int = 401) -> Reply:
    body = {"error": {"message": f"Incorrect API key provided: {secret}.", "type": "invalid_request_error"}}
    return Reply(body=json.dumps(body).encode(), status=status)


def echoing_mid_stream(secret: str) -> Reply:
    """A stream that starts, then reports an error quoting ``secret``."""
    first = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}, "finish_reason": None}]}
    error = {"error": {"message": f"token {secret} expired mid-stream", "type": "server_error"}}
    return Reply(body=f"data: {json.dumps(first)}\n\ndata: {json.dumps(error)}\n\n".encode(),
                 headers={"Content-Type": "text/event-stream"})


@pytest.fixture(scope="module")
def upstream() -> Iterator[ReplayServer]:
    script = {
        "keyed": Reply("openai/vllm_text.sse"),
        "refused": Reply(body=ECHOING_401, status=401),
        "cut": Reply("openai/vllm_text.sse", abort_after=3),
        "echo-client": echoing(CLIENT_TOKEN),
        "echo-client-stream": echoing_mid_stream(CLIENT_TOKEN),
        "basic": Reply("openai/vllm_text.sse", whole="openai/vllm_text.json"),
        "echo-basic": echoing(f"{BASIC} ({PASSWORD})"),
        "/v1/models": Reply("openai/models.json"),
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
              - {{name: "echo-client*", backend: openai, base_url: "{upstream.url}/v1", forward_auth: true}}
              - name: "*basic"
                backend: openai
                base_url: "http://{URL_CREDENTIALS}@{upstream.url.removeprefix('http://')}/v1"
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
    # The access log did run, at debug level, as JSON.
    access = [json.loads(line) for line in logged.err.splitlines() if line.startswith("{")]
    assert any(entry.get("event") == "request" and entry.get("status") == 401 for entry in access)
    assert any("Incorrect API key provided: ***." in body for body in bodies)
    assert KEY not in everything and CLIENT_TOKEN not in everything
    assert all(KEY not in body for body in bodies)
    # ...and it was really sent: the test would pass vacuously otherwise.
    assert any(r.headers.get("authorization") == f"Bearer {KEY}" for r in upstream.received)


def test_credentials_in_the_url_become_a_basic_authorization(gateway: RunningServer, upstream: ReplayServer) -> None:
    """``http://user:pass@host/v1`` was a 500 on every request (aiohttp refuses a URL
    with credentials next to an Authorization header); now they travel as the header."""
    before = len(upstream.received)
    for path in ("/v1/chat/completions", "/api/chat"):
        response = httpx.post(gateway.url + path, json={"model": "basic", "messages": user(), "stream": False})
        assert response.status_code == 200, response.text
    received = upstream.received[before:]
    assert [r.headers.get("authorization") for r in received] == [BASIC, BASIC]
    ready = httpx.get(gateway.url + "/health/ready")
    assert ready.status_code == 200 and f"{upstream.url}/v1 reachable" in ready.text


def test_no_url_credentials_or_forwarded_key_in_answers_logs_or_metrics(
    gateway: RunningServer, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    configure_logging("json", "debug")
    caplog.set_level(logging.DEBUG)
    auth = {"Authorization": f"Bearer {CLIENT_TOKEN}"}
    try:
        answers = []
        for model in ("echo-client", "echo-client-stream", "echo-basic", "basic"):
            for path in ("/v1/chat/completions", "/api/chat"):
                for stream in (False, True):
                    body = {"model": model, "messages": user(), "stream": stream}
                    answers.append(httpx.post(gateway.url + path, json=body, headers=auth).text)
        answers += [httpx.get(gateway.url + p).text for p in ("/health/ready", "/metrics", "/v1/models", "/api/tags")]
    finally:
        structlog.reset_defaults()
    logged = capfd.readouterr()
    everything = "\n".join(answers) + logged.out + logged.err + caplog.text
    assert "Incorrect API key provided: ***." in everything  # the echo did come back, redacted
    assert "token *** expired mid-stream" in everything
    for secret in (CLIENT_TOKEN, PASSWORD, URL_CREDENTIALS, BASIC.split()[1], "gateway:"):
        assert secret not in everything, secret


def test_credentials_in_the_url_and_an_api_key_are_refused_at_config_check() -> None:
    with pytest.raises(ConfigError, match="carries credentials .* and 'api_key' is set too"):
        config_from_yaml(
            """\
            models:
              - {name: m, backend: openai, base_url: "http://u:p@127.0.0.1:9/v1", api_key: k}
            """
        )
