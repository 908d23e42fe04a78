"""CORS over real HTTP: on by default with Ollama's allow-list, preflights answered as
browsers expect (before authentication), origins configurable with wildcards and
``${ENV}``, credentials on request, everything else refused."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.server import RunningServer, config_from_yaml, serve

MODEL = "  - {name: scripted, backend: 'tests.support.scripted:ScriptedBackend'}\n"
# One origin of each pattern in Ollama's default allow-list.
ALLOWED = [
    "http://localhost", "https://localhost", "http://localhost:3000", "https://localhost:8443",
    "http://127.0.0.1", "https://127.0.0.1", "http://127.0.0.1:5173", "https://127.0.0.1:1",
    "http://0.0.0.0", "https://0.0.0.0", "http://0.0.0.0:8080", "https://0.0.0.0:65535",
    "app://obsidian.md", "file://", "tauri://localhost", "vscode-webview://1b2c3d4e5f", "vscode-file://vscode-app",
]  # fmt: skip
REFUSED = ["https://evil.example", "http://localhost.evil.example", "https://127.0.0.1.nip.io", "null"]


@pytest.fixture(scope="module")
def default_server() -> Iterator[RunningServer]:
    """No CORS setting at all, and API keys on: preflights must still pass."""
    with serve(config_from_yaml("server:\n  api_keys: [k]\nmodels:\n" + MODEL)) as server:
        yield server


def preflight(server: RunningServer, origin: str, path: str = "/api/chat") -> httpx.Response:
    headers = {"Origin": origin, "Access-Control-Request-Method": "POST",
               "Access-Control-Request-Headers": "content-type, authorization, x-stainless-os"}  # fmt: skip
    return httpx.options(server.url + path, headers=headers)


@pytest.mark.parametrize("origin", ALLOWED)
def test_a_preflight_from_each_allow_listed_origin_succeeds(default_server: RunningServer, origin: str) -> None:
    reply = preflight(default_server, origin)
    assert reply.status_code == 204
    assert reply.headers["access-control-allow-origin"] == origin and reply.headers["vary"] == "Origin"
    assert "POST" in reply.headers["access-control-allow-methods"]
    assert {"authorization", "content-type", "x-stainless-os"} <= {
        h.strip().lower() for h in reply.headers["access-control-allow-headers"].split(",")
    }
    assert int(reply.headers["access-control-max-age"]) > 0
    assert "access-control-allow-credentials" not in reply.headers


@pytest.mark.parametrize("origin", REFUSED)
def test_a_preflight_from_elsewhere_is_refused(default_server: RunningServer, origin: str) -> None:
    reply = preflight(default_server, origin)
    assert reply.status_code == 400 and "access-control-allow-origin" not in reply.headers
    simple = httpx.get(default_server.url + "/api/version", headers={"Origin": origin})
    assert "access-control-allow-origin" not in simple.headers


def test_the_request_after_the_preflight_carries_the_headers_a_page_reads(default_server: RunningServer) -> None:
    body = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "stream": False}
    reply = httpx.post(default_server.url + "/api/chat", json=body,
                       headers={"Origin": "app://obsidian.md", "Authorization": "Bearer k"})  # fmt: skip
    assert reply.status_code == 200
    assert reply.headers["access-control-allow-origin"] == "app://obsidian.md"
    assert {"X-Request-Id", "Retry-After"} <= {h.strip() for h in reply.headers["access-control-expose-headers"].split(",")}
    refused = httpx.post(default_server.url + "/api/chat", json=body, headers={"Origin": "app://obsidian.md"})
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == "app://obsidian.md"


def test_configured_patterns_from_the_environment_replace_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_ORIGINS", "https://*.example.com, app://*")
    config = config_from_yaml('server:\n  cors_origins: "${TEST_ORIGINS}"\n  cors_allow_credentials: true\nmodels:\n' + MODEL)
    with serve(config) as server:
        allowed = preflight(server, "https://app.example.com", "/v1/chat/completions")
        assert allowed.status_code == 204 and allowed.headers["access-control-allow-origin"] == "https://app.example.com"
        assert allowed.headers["access-control-allow-credentials"] == "true"
        assert preflight(server, "app://obsidian.md").status_code == 204
        for origin in ("http://localhost:3000", "https://example.com.evil.net", "https://evil.net/x.example.com"):
            assert preflight(server, origin).status_code == 400, origin


def test_an_empty_list_turns_cors_off() -> None:
    with serve(config_from_yaml("server:\n  cors_origins: []\nmodels:\n" + MODEL)) as server:
        reply = httpx.get(server.url + "/api/version", headers={"Origin": "http://localhost:3000"})
        assert "access-control-allow-origin" not in reply.headers
