"""The page's routes over real HTTP: what is open, what needs the key, the headers that
keep the page to itself, and ``server.ui: false``."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from html.parser import HTMLParser

import httpx
import pytest

from dragoman.proxy.ui.routes import CONTENT_SECURITY_POLICY, STATIC
from tests.support.server import RunningServer, config_from_yaml, serve

KEY = "ui-test-key-4f1c"
UPSTREAM_SECRET = "sk-upstream-secret-9d2e"
CONFIG = f"""\
server:
  api_keys: [{KEY}]
models:
  - name: scripted
    backend: tests.support.scripted:ScriptedBackend
    defaults: {{temperature: 0.3}}
  - name: remote
    backend: openai
    base_url: "http://127.0.0.1:9/v1"
    api_key: {UPSTREAM_SECRET}
  - name: basic
    backend: ollama
    base_url: "http://user:hunter2@127.0.0.1:9"
aliases:
  nickname: scripted
"""
AUTH = {"Authorization": f"Bearer {KEY}"}
STATIC_FILES = sorted(p.name for p in STATIC.iterdir())


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with serve(config_from_yaml(CONFIG)) as running:
        yield running


@pytest.fixture(scope="module")
def http(server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        yield client


@pytest.mark.parametrize("path", ["/ui", "/ui/", *(f"/ui/static/{name}" for name in STATIC_FILES)])
def test_page_and_its_files_need_no_key_and_carry_the_policy(http: httpx.Client, path: str) -> None:
    response = http.get(path)
    assert response.status_code == 200
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"
    expected = {"": "text/html", ".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
    suffix = "." + path.rsplit(".", 1)[1] if "/static/" in path else ""
    assert response.headers["content-type"].startswith(expected[suffix])


def test_the_policy_allows_nothing_from_elsewhere() -> None:
    directives = dict(d.strip().split(" ", 1) for d in CONTENT_SECURITY_POLICY.split(";"))
    assert directives["default-src"] == "'self'"
    assert directives["script-src"] == "'self'" and directives["style-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'" and directives["object-src"] == "'none'"
    assert "unsafe" not in CONTENT_SECURITY_POLICY


class _Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.problems: list[str] = []
        self.links: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "style":
            self.problems.append("<style> element")
        if tag == "script" and not named.get("src"):
            self.problems.append("inline <script>")
        self._in_script = tag == "script"
        for name, value in attrs:
            if name == "style" or name.startswith("on"):
                self.problems.append(f"<{tag} {name}=…>")
            if name in ("src", "href") and value:
                self.links.append(value)

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.problems.append("script body")


def test_the_page_has_no_inline_code_and_loads_only_its_own_files(http: httpx.Client) -> None:
    markup = _Markup()
    markup.feed(http.get("/ui").text)
    assert markup.problems == []
    assert markup.links and all(link.startswith(("/ui/static/", "#")) for link in markup.links)
    for name in STATIC_FILES:  # no CDN, no remote font: nothing names another origin
        text = (STATIC / name).read_text().replace("http://www.w3.org/2000/svg", "")  # a namespace, not a fetch
        assert "https://" not in text and "http://" not in text
        # text goes in as text: nothing that parses markup or evaluates strings
        assert not re.search(r"\.(inner|outer)HTML\b|insertAdjacentHTML|document\.write|\beval\(|new Function", text)


def test_the_page_says_a_key_is_needed_and_holds_no_data(http: httpx.Client) -> None:
    page = http.get("/ui").text
    assert 'data-keys-required="true"' in page
    for secret in (KEY, UPSTREAM_SECRET, "hunter2", "scripted", "remote"):
        assert secret not in page  # models and config come only through keyed calls


@pytest.mark.parametrize(("method", "path"), [("GET", "/ui/api/config"), ("POST", "/ui/api/turn"), ("GET", "/ui/static/nope.js")])
def test_data_needs_the_key(http: httpx.Client, method: str, path: str) -> None:
    response = http.request(method, path, json={})
    assert response.status_code == 401
    assert response.json() == {"error": "missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'"}
    assert http.request(method, path, json={}, headers={"Authorization": "Bearer wrong"}).status_code == 401


def test_config_view_masks_every_secret(http: httpx.Client) -> None:
    response = http.get("/ui/api/config", headers=AUTH)
    assert response.status_code == 200
    for secret in (KEY, UPSTREAM_SECRET, "hunter2"):
        assert secret not in response.text
    view = response.json()
    assert view["api_keys"] is True
    remote = next(e for e in view["entries"] if e["name"] == "remote")
    assert remote["answers_from"] == ["http://127.0.0.1:9/v1"] and remote["settings"]["api_key"] == "***"
    basic = next(e for e in view["entries"] if e["name"] == "basic")
    assert basic["answers_from"] == ["http://127.0.0.1:9"]
    assert view["check"][2].split() == ["scripted", "tests.support.scripted:ScriptedBackend", "exact"]


def test_unknown_static_file_is_404_with_the_key(http: httpx.Client) -> None:
    assert http.get("/ui/static/nope.js", headers=AUTH).status_code == 404
    assert http.get("/ui/static/..%2Fturn.py", headers=AUTH).status_code == 404


def test_turn_view_shows_the_defaults_the_backend_got(http: httpx.Client) -> None:
    request = {"model": "nickname", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    chat = http.post("/api/chat", json=request, headers=AUTH)
    assert chat.status_code == 200
    turn = {"dialect": "ollama", "request": request, "response": chat.text}
    view = http.post("/ui/api/turn", json=turn, headers=AUTH).json()
    assert view["canonical"]["options"] == {"temperature": 0.3}  # the entry's default, merged
    assert view["ollama"]["request"] == request and view["ollama"]["translated"] is False
    assert view["openai"]["translated"] is True and "temperature" not in view["openai"]["request"]
    frames = [line for line in view["openai"]["response"].splitlines() if line.startswith("data: {")]
    assert "".join(json.loads(f[6:])["choices"][0]["delta"].get("content", "") for f in frames if json.loads(f[6:])["choices"]) == view["reply"]["content"]


def test_turn_view_errors_are_clear(http: httpx.Client) -> None:
    unknown = {"dialect": "openai", "request": {"model": "nope", "messages": [{"role": "user", "content": "x"}]}}
    response = http.post("/ui/api/turn", json=unknown, headers=AUTH)
    assert (response.status_code, response.json()) == (404, {"error": "model 'nope' not found"})
    response = http.post("/ui/api/turn", content=b"x" * (5 * 1024 * 1024), headers=AUTH)
    assert response.status_code == 413
    assert response.json()["error"].startswith(f"request body: larger than {4 * 1024 * 1024} bytes;")  # the view's own bound
    many = {"dialect": "openai", "request": {"model": "scripted", "messages": [{"role": "user", "content": "x"}] * 10_001}}
    response = http.post("/ui/api/turn", json=many, headers=AUTH)
    assert response.status_code == 400 and "(server.limits.max_messages)" in response.json()["error"]


def test_turn_views_do_not_count_as_chats(http: httpx.Client) -> None:
    request = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    http.post("/ui/api/turn", json={"dialect": "ollama", "request": request}, headers=AUTH)
    metrics = http.get("/metrics", headers=AUTH).text
    ours = [line for line in metrics.splitlines() if line.startswith("dragoman_requests_total") and 'route="/ui' in line]
    assert ours and all('model=""' in line for line in ours)


def test_ui_false_turns_it_off() -> None:
    config = config_from_yaml("server: {ui: false}\nmodels:\n  - {name: scripted, backend: 'tests.support.scripted:ScriptedBackend'}\n")
    with serve(config) as off, httpx.Client(base_url=off.url) as http:
        for path in ("/ui", "/ui/static/main.js", "/ui/api/config"):
            assert http.get(path).status_code == 404
        assert http.get("/").text == "Ollama is running"


def _big_turn() -> bytes:
    """A turn near the 4 MiB bound: a long OpenAI stream of small chunks, the most work
    per byte (each frame decoded, converted and written in the other dialect)."""
    frame = 'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"scripted","choices":[{"index":0,"delta":{"content":"ab"},"finish_reason":null}]}\n\n'
    stream = frame * ((4 * 1024 * 1024 - 100_000) // len(json.dumps(frame))) + "data: [DONE]\n\n"
    request = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    return json.dumps({"dialect": "openai", "request": request, "response": stream}).encode()


def test_big_turns_leave_other_clients_answered(server: RunningServer, http: httpx.Client) -> None:
    """Four 4 MiB turns at once held the event loop 1.9-2.65 s (17 ms before them): the
    view is now built on a thread, one turn at a time."""
    body = _big_turn()
    assert len(body) < 4 * 1024 * 1024
    views: list[httpx.Response] = []

    def post() -> None:
        with httpx.Client(base_url=server.url, timeout=120) as own:
            views.append(own.post("/ui/api/turn", content=body, headers={**AUTH, "Content-Type": "application/json"}))

    assert http.get("/api/version").status_code == 200  # warm
    turns = [threading.Thread(target=post) for _ in range(4)]
    for turn in turns:
        turn.start()
    waits = []
    while any(turn.is_alive() for turn in turns):
        asked = time.perf_counter()
        assert http.get("/api/version").status_code == 200
        waits.append(time.perf_counter() - asked)
        time.sleep(0.01)
    for turn in turns:
        turn.join()
    assert [view.status_code for view in views] == [200] * 4, views[0].text[:200]
    assert views[0].json()["reply"]["content"].startswith("abab")
    assert len(waits) > 10 and max(waits) < 0.3, (len(waits), sorted(waits)[-5:])
