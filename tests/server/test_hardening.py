"""Auth, limits, health, metrics, CORS and graceful shutdown over real HTTP."""

from __future__ import annotations

import base64
import gzip
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import ollama
import openai
import pytest
import structlog
import structlog.testing

from tests.support.server import RunningServer, config_from_yaml, free_port, serve

ROOT = Path(__file__).resolve().parents[2]
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    keys_file = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys_file.write_text("# team keys\nfile-key-1\n")
    config = config_from_yaml(
        f"""\
        server:
          api_keys: "key-a, key-b"
          api_keys_file: {keys_file}
          cors_origins: ["https://app.example"]
          limits:
            max_body_bytes: 200000
            max_images: 1
            max_image_bytes: 100000
            max_concurrent: 1
            max_queue: 1
            request_timeout: 1.5
        models:
          - name: scripted
            backend: tests.support.scripted:ScriptedBackend
            context_length: 64
          - name: slow
            backend: tests.support.scripted:ScriptedBackend
            delay: 0.05
        """
    )
    with serve(config) as server:
        yield server


AUTH = {"Authorization": "Bearer key-b"}


@pytest.mark.parametrize(
    ("headers", "status"),
    [({}, 401), ({"Authorization": "Bearer wrong"}, 401), ({"Authorization": "Basic key-a"}, 401), (AUTH, 200),
     ({"Authorization": "Bearer file-key-1"}, 200)],
)
def test_api_keys(guarded: RunningServer, headers: dict[str, str], status: int) -> None:
    oa = httpx.post(guarded.url + "/v1/chat/completions", json={"model": "scripted", "messages": user("hi")}, headers=headers)
    ol = httpx.post(guarded.url + "/api/chat", json={"model": "scripted", "stream": False, "messages": user("hi")}, headers=headers)
    assert (oa.status_code, ol.status_code) == (status, status)
    if status == 401:
        assert oa.json()["error"]["type"] == "authentication_error"
        assert isinstance(ol.json()["error"], str)
        assert oa.headers["www-authenticate"] == "Bearer"


def test_open_paths_need_no_key(guarded: RunningServer) -> None:
    for path in ("/", "/api/version", "/health/live", "/health/ready"):
        assert httpx.get(guarded.url + path).status_code == 200, path
    assert httpx.get(guarded.url + "/api/tags").status_code == 401


def test_official_clients_with_keys(guarded: RunningServer) -> None:
    reply = openai.OpenAI(base_url=guarded.url + "/v1", api_key="key-a").chat.completions.create(model="scripted", messages=user("hi"))
    assert reply.choices[0].message.content == "Hello, world"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=guarded.url + "/v1", api_key="nope", max_retries=0).models.list()
    client = ollama.Client(host=guarded.url, headers={"Authorization": "Bearer key-a"})
    assert client.chat(model="scripted", messages=user("hi")).message.content == "Hello, world"


def test_body_too_large_is_413(guarded: RunningServer) -> None:
    big = {"model": "scripted", "messages": user("x" * 300_000)}
    r = httpx.post(guarded.url + "/api/chat", json=big, headers=AUTH)
    assert r.status_code == 413 and isinstance(r.json()["error"], str)
    # It says the bound and the setting, in each dialect (it was "Request Entity Too Large").
    assert r.json()["error"].startswith("request body: larger than 200000 bytes (server.limits.max_body_bytes)")
    claude = httpx.post(guarded.url + "/v1/messages", json=big | {"max_tokens": 8}, headers=AUTH)
    assert claude.status_code == 413 and claude.json()["error"]["type"] == "request_too_large"
    assert "200000 bytes (server.limits.max_body_bytes)" in claude.json()["error"]["message"]


@pytest.mark.parametrize("path", ["/api/chat", "/v1/chat/completions", "/v1/messages", "/v1/responses"])
def test_a_compressed_body_is_415_saying_so(guarded: RunningServer, path: str) -> None:
    body = gzip.compress(json.dumps({"model": "scripted", "max_tokens": 8, "messages": user("hi"), "input": "hi"}).encode())
    headers = AUTH | {"content-type": "application/json", "content-encoding": "gzip"}
    r = httpx.post(guarded.url + path, content=body, headers=headers)
    assert r.status_code == 415  # was a 400 "invalid character (byte 0)"
    text = r.text
    assert "Content-Encoding 'gzip'" in text and "send it uncompressed" in text
    if path != "/api/chat":
        assert r.json()["error"]["type"] == "invalid_request_error"  # a client's mistake, not api_error


def test_image_limits(guarded: RunningServer) -> None:
    image = base64.b64encode(PNG).decode()
    two = {"model": "scripted", "stream": False, "messages": [{"role": "user", "content": "x", "images": [image, image]}]}
    r = httpx.post(guarded.url + "/api/chat", json=two, headers=AUTH)
    assert r.status_code == 400 and "limit is 1" in r.json()["error"]


def test_max_tokens_clamped_to_context(guarded: RunningServer) -> None:
    from tests.support.scripted import ScriptedBackend

    httpx.post(guarded.url + "/v1/chat/completions", json={"model": "scripted", "max_tokens": 10_000, "messages": user("hi")}, headers=AUTH)
    assert ScriptedBackend.last_request.options.num_predict == 64


def test_request_timeout_ends_stream_with_error(guarded: RunningServer) -> None:
    started = time.monotonic()
    with httpx.stream("POST", guarded.url + "/api/chat", json={"model": "slow", "messages": user("script:slow")}, headers=AUTH) as r:
        lines = [json.loads(line) for line in r.iter_lines()]
    assert "timed out" in lines[-1]["error"]
    assert time.monotonic() - started < 4


def test_queue_bound_answers_503_with_retry_after(guarded: RunningServer) -> None:
    body = {"model": "slow", "messages": user("script:slow")}
    with httpx.stream("POST", guarded.url + "/api/chat", json=body, headers=AUTH) as running, \
            httpx.Client(timeout=5) as client:
        lines = running.iter_lines()  # keep a reference: closing it closes the response
        next(lines)
        # one more fits the queue (it waits); the next is refused at once
        queued: list[int] = []
        thread = threading.Thread(
            target=lambda: queued.append(httpx.post(guarded.url + "/api/chat", json={"model": "slow", "stream": False, "messages": user("hi")}, headers=AUTH, timeout=10).status_code)
        )
        thread.start()
        time.sleep(0.3)
        refused = client.post(guarded.url + "/api/chat", json=body, headers=AUTH)
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "1"
        metrics = client.get(guarded.url + "/metrics", headers=AUTH).text
        assert 'dragoman_queue_depth{model="slow"} 1.0' in metrics
    thread.join(timeout=10)
    assert queued == [200]


def test_cors(guarded: RunningServer) -> None:
    preflight = httpx.options(
        guarded.url + "/v1/chat/completions",
        headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST"},
    )
    assert preflight.headers.get("access-control-allow-origin") == "https://app.example"
    other = httpx.get(guarded.url + "/api/version", headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in other.headers


def test_metrics_after_traffic(guarded: RunningServer) -> None:
    httpx.post(guarded.url + "/v1/chat/completions", json={"model": "scripted", "messages": user("hi")}, headers=AUTH)
    text = httpx.get(guarded.url + "/metrics", headers=AUTH).text
    assert 'dragoman_requests_total{dialect="openai",model="scripted",route="/v1/chat/completions",status="200"}' in text
    assert 'dragoman_tokens_total{direction="out",model="scripted"}' in text
    assert "dragoman_time_to_first_token_seconds_bucket" in text
    assert 'route="/health/live"' in text  # probes are counted too


def test_health(scripted_server: RunningServer) -> None:
    assert httpx.get(scripted_server.url + "/health/live").json() == {"status": "ok", "checks": []}
    ready = httpx.get(scripted_server.url + "/health/ready").json()
    assert ready["status"] == "ready" and ready["checks"][0]["name"] == "config"


def test_sigterm_lets_streams_finish_then_cuts_them(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "server:\n  shutdown_grace: 1\n"
        "models:\n  - {name: slow, backend: 'tests.support.scripted:ScriptedBackend', delay: 0.05}\n"
    )
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dragoman.proxy.cli", "serve", "--config", str(config), "--port", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                httpx.get(url + "/health/live")
                break
            except httpx.TransportError:
                time.sleep(0.1)
        with httpx.stream("POST", url + "/api/chat", json={"model": "slow", "messages": user("script:slow")}) as r:
            lines = r.iter_lines()
            first = json.loads(next(lines))
            proc.send_signal(signal.SIGTERM)
            sent_at = time.monotonic()
            rest = [json.loads(line) for line in lines]
        assert first["message"]["content"].startswith("tick")
        assert len(rest) > 5, "the stream went on during the grace period"
        assert "shutting down" in rest[-1]["error"]
        assert 0.8 < time.monotonic() - sent_at < 4
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_ready_without_a_key_answers_status_only(guarded: RunningServer) -> None:
    bare = httpx.get(guarded.url + "/health/ready")
    assert bare.status_code == 200 and bare.json() == {"status": "ready", "checks": []}
    wrong = httpx.get(guarded.url + "/health/ready", headers={"Authorization": "Bearer wrong"})
    assert wrong.json() == {"status": "ready", "checks": []}
    keyed = httpx.get(guarded.url + "/health/ready", headers=AUTH).json()
    assert keyed["checks"][0] == {"name": "config", "ok": True, "detail": "<test>"}  # the config's file name
    assert {c["name"] for c in keyed["checks"]} >= {"model:scripted", "model:slow"}


@pytest.mark.parametrize(("method", "path", "status"), [("GET", "/nowhere", 404), ("GET", "/v1/nowhere", 404),
                                                        ("DELETE", "/api/chat", 405), ("GET", "/v1/chat/completions", 405)])
def test_404_and_405_are_logged_counted_and_carry_a_request_id(guarded: RunningServer, method: str, path: str, status: int) -> None:
    request_id = f"probe-{status}-{len(path)}"
    with structlog.testing.capture_logs() as logged:
        r = httpx.request(method, guarded.url + path, headers={**AUTH, "X-Request-Id": request_id})
        deadline = time.monotonic() + 5  # the line is written once the last byte has gone out
        while not any(e.get("request_id") == request_id for e in logged) and time.monotonic() < deadline:
            time.sleep(0.01)
    assert r.status_code == status
    assert r.headers["x-request-id"] == request_id
    [line] = [e for e in logged if e.get("request_id") == request_id and e["event"] == "request"]
    assert (line["status"], line["path"], line["method"]) == (status, path, method)
    dialect = "openai" if path.startswith("/v1/") else "ollama"
    metrics = httpx.get(guarded.url + "/metrics", headers=AUTH).text
    route = path if path in ("/api/chat", "/v1/chat/completions") else "other"
    assert f'dragoman_requests_total{{dialect="{dialect}",model="",route="{route}",status="{status}"}}' in metrics
