"""Cross-site "simple" requests over real HTTP: a request whose Origin is neither on the
CORS allow-list nor the server's own is refused before its handler runs (issue 24,
finding 2), whatever its body's type; allowed origins, preflights and clients that send
no Origin are served as before."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import ollama
import openai
import pytest

from tests.support.scripted import ScriptedBackend
from tests.support.server import RunningServer, config_from_yaml, serve

MODELS = "models:\n  - {name: scripted, backend: 'tests.support.scripted:ScriptedBackend'}\n"
CROSS_SITE = ["https://evil.example", "null", "http://localhost.evil.example", "http://127.0.0.1.nip.io:11434"]
# Each dialect's generating routes, as a page would post to them without a preflight.
ROUTES = {
    "/api/chat": lambda text: {"model": "scripted", "stream": False, "messages": [{"role": "user", "content": text}]},
    "/api/generate": lambda text: {"model": "scripted", "stream": False, "prompt": text},
    "/v1/chat/completions": lambda text: {"model": "scripted", "messages": [{"role": "user", "content": text}]},
    "/v1/completions": lambda text: {"model": "scripted", "prompt": text},
    "/v1/messages": lambda text: {"model": "scripted", "max_tokens": 8, "messages": [{"role": "user", "content": text}]},
    "/v1/responses": lambda text: {"model": "scripted", "input": text, "store": True},
}
SIMPLE_TYPES = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"]


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with serve(config_from_yaml(MODELS)) as running:
        yield running


def post(server: RunningServer, path: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(server.url + path, content=body, headers=headers)


@pytest.mark.parametrize("origin", CROSS_SITE)
@pytest.mark.parametrize("path", list(ROUTES))
def test_a_cross_site_simple_request_never_reaches_its_handler(server: RunningServer, origin: str, path: str) -> None:
    for content_type in SIMPLE_TYPES:
        probe = f"probe-{uuid.uuid4().hex}"
        body = httpx.Request("POST", "http://x", json=ROUTES[path](probe)).content
        reply = post(server, path, body, {"Origin": origin, "Content-Type": content_type})
        assert reply.status_code == 403, (content_type, reply.text)
        assert f"Origin '{origin}' may not call this server" in reply.text and "server.cors_origins" in reply.text
        assert "access-control-allow-origin" not in reply.headers
        assert not ScriptedBackend.ran(probe), (path, content_type)


def test_a_cross_site_unload_or_pull_is_refused(server: RunningServer) -> None:
    assert httpx.post(server.url + "/api/generate", json={"model": "scripted", "prompt": ""}).status_code == 200
    evil = {"Origin": "https://evil.example", "Content-Type": "text/plain"}
    unload = post(server, "/api/generate", b'{"model": "scripted", "prompt": "", "keep_alive": 0}', evil)
    assert unload.status_code == 403 and set(unload.json()) == {"error"}
    assert [m["name"] for m in httpx.get(server.url + "/api/ps").json()["models"]] == ["scripted"]
    pull = post(server, "/api/pull", b'{"model": "scripted"}', evil)
    assert pull.status_code == 403


def test_the_refusal_comes_in_the_dialect_of_the_path(server: RunningServer) -> None:
    evil = {"Origin": "null", "Content-Type": "text/plain"}
    anthropic = post(server, "/v1/messages", b"{}", evil).json()
    assert anthropic["type"] == "error" and anthropic["error"]["type"] == "permission_error"
    chat = post(server, "/v1/chat/completions", b"{}", evil).json()
    assert chat["error"]["code"] == "origin_not_allowed"
    assert httpx.get(server.url + "/api/tags", headers={"Origin": "null"}).status_code == 403  # reads too


def test_an_allow_listed_origin_is_served_with_its_cors_answer(server: RunningServer) -> None:
    """``http://localhost:*`` is on the default (Ollama's) allow-list: a web app there works."""
    origin = "http://localhost:3000"
    preflight = httpx.options(server.url + "/api/chat", headers={"Origin": origin, "Access-Control-Request-Method": "POST",
                                                                 "Access-Control-Request-Headers": "content-type"})  # fmt: skip
    assert preflight.status_code == 204 and preflight.headers["access-control-allow-origin"] == origin
    probe = f"probe-{uuid.uuid4().hex}"
    reply = httpx.post(server.url + "/api/chat", json=ROUTES["/api/chat"](probe), headers={"Origin": origin})
    assert reply.status_code == 200 and reply.headers["access-control-allow-origin"] == origin
    assert ScriptedBackend.ran(probe)


def test_a_preflight_from_elsewhere_is_still_the_cors_layers_400(server: RunningServer) -> None:
    reply = httpx.options(server.url + "/api/chat", headers={"Origin": "https://evil.example",
                                                             "Access-Control-Request-Method": "POST"})  # fmt: skip
    assert reply.status_code == 400 and "access-control-allow-origin" not in reply.headers


def test_clients_that_send_no_origin_are_unaffected(server: RunningServer) -> None:
    answer = openai.OpenAI(base_url=server.url + "/v1", api_key="unused").chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "hi"}]
    )
    assert answer.choices[0].message.content
    assert ollama.Client(host=server.url).chat(model="scripted", messages=[{"role": "user", "content": "hi"}]).message.content


def test_the_servers_own_origin_is_served_with_cors_off() -> None:
    """The web page posts with ``Origin`` = the server's own; that must not depend on the
    allow-list (here empty: CORS off). Another port of the same host is another origin."""
    with serve(config_from_yaml("server:\n  cors_origins: []\n" + MODELS)) as server:
        for own in (f"http://127.0.0.1:{server.port}", f"http://localhost:{server.port}"):
            host = own.removeprefix("http://")
            probe = f"probe-{uuid.uuid4().hex}"
            reply = httpx.post(server.url + "/api/chat", json=ROUTES["/api/chat"](probe), headers={"Origin": own, "Host": host})
            assert reply.status_code == 200 and ScriptedBackend.ran(probe), own
        for other in (f"http://127.0.0.1:{server.port + 1}", f"https://127.0.0.1:{server.port}", f"http://localhost:{server.port}"):
            probe = f"probe-{uuid.uuid4().hex}"
            reply = httpx.post(server.url + "/api/chat", json=ROUTES["/api/chat"](probe), headers={"Origin": other})
            assert reply.status_code == 403 and not ScriptedBackend.ran(probe), other
