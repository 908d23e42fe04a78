"""DNS rebinding and cross-site requests in a real Chromium (issue 24, findings 1 and 2).

Chromium resolves ``evil.example`` to 127.0.0.1 (``--host-resolver-rules``), as an
attacker's DNS would after a page of theirs has loaded. Two attacks:

- rebinding: a script in the origin ``http://evil.example:PORT`` (PORT: dragoman's), whose
  same-origin requests reach dragoman on 127.0.0.1. (The document is dragoman's own
  answer under that name: one fulfilled by the test, as the attacker's server would
  have sent it, counts as a public page, and Chromium's Private Network Access then
  blocks its requests to loopback before they leave — a defence Firefox and Safari
  do not have, and Chromium not for every kind of request);
- cross-site: a page at ``http://evil.example:PAGE`` (a stand-in page server) sends the
  requests a browser sends without a preflight (``no-cors``, ``text/plain``, form
  bodies, a sandboxed frame's ``Origin: null``) to dragoman.

Both must end in a 403 with no handler run: the scripted backend never sees the probe
text, and dragoman's own counters show the refusals arrived. The legitimate paths stay
open: the web page on 127.0.0.1 and localhost (CORS off, so only its own origin lets it
post), and a web app on an allow-listed origin (``http://localhost:*``).
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.support.scripted import ScriptedBackend
from tests.support.server import RunningServer, config_from_yaml, serve
from tests.ui.conftest import CHROMIUM, LAUNCH_ARGS

MODELS = "models:\n  - {name: scripted, backend: 'tests.support.scripted:ScriptedBackend'}\n"
BLANK = b"<!doctype html><title>page</title><p>a page</p>"


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(BLANK)))
        self.end_headers()
        self.wfile.write(BLANK)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def page_server() -> Iterator[int]:
    """The stand-in for a site elsewhere: a blank page on 127.0.0.1, any name."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from pathlib import Path

    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no Chromium at {CHROMIUM}: install Debian's package (apt-get install -y chromium), as .ci/run does")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        args = [*LAUNCH_ARGS, "--host-resolver-rules=MAP evil.example 127.0.0.1"]
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=args, headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def dragoman() -> Iterator[RunningServer]:
    """The default CORS allow-list (Ollama's)."""
    with serve(config_from_yaml(MODELS)) as server:
        yield server


@pytest.fixture
def page(browser: Any) -> Iterator[Page]:
    context = browser.new_context()
    try:
        yield context.new_page()
    finally:
        context.close()


def refusals(server: RunningServer) -> int:
    """403s dragoman has answered (its /metrics, summed over routes)."""
    text = httpx.get(server.url + "/metrics").text
    return int(sum(float(v) for v in re.findall(r'^dragoman_requests_total\{[^}]*status="403"[^}]*\} (\S+)$', text, re.M)))


def chat_body(text: str) -> str:
    return '{"model": "scripted", "stream": false, "messages": [{"role": "user", "content": "%s"}]}' % text


SEND = """async ([url, init]) => {
    try { const r = await fetch(url, init); return {type: r.type, status: r.status, body: r.type === "opaque" ? "" : await r.text()}; }
    catch (e) { return {error: String(e)}; }
}"""


def test_a_rebound_name_gets_403s_and_runs_no_handler(page: Page, dragoman: RunningServer) -> None:
    origin = f"http://evil.example:{dragoman.port}"
    # Opened under the rebound name, dragoman's own page is refused; what matters is that
    # the script below runs in the origin http://evil.example:PORT and reaches 127.0.0.1.
    assert page.goto(origin + "/ui").status == 403  # type: ignore[union-attr]
    before = refusals(dragoman)
    for path in ("/ui/api/config", "/api/tags", "/v1/models", "/metrics"):
        reply = page.evaluate(SEND, [path, {}])
        assert reply.get("status") == 403, (path, reply)
        assert "server.allowed_hosts" in reply["body"]
    probe = f"probe-{uuid.uuid4().hex}"
    init = {"method": "POST", "headers": {"Content-Type": "application/json"}, "body": chat_body(probe)}
    posted = page.evaluate(SEND, ["/api/chat", init])
    assert posted.get("status") == 403 and "DNS rebinding" in posted["body"], posted
    assert not ScriptedBackend.ran(probe)
    assert refusals(dragoman) - before == 5


def test_cross_site_simple_requests_never_reach_a_handler(page: Page, dragoman: RunningServer, page_server: int) -> None:
    page.goto(f"http://evil.example:{page_server}/")
    base = f"http://127.0.0.1:{dragoman.port}"
    rebound = f"http://evil.example:{dragoman.port}"
    attempts = [
        (base + "/api/chat", {"mode": "no-cors", "headers": {"Content-Type": "text/plain"}}),
        (base + "/api/generate", {"mode": "no-cors", "headers": {"Content-Type": "application/x-www-form-urlencoded"}}),
        (base + "/v1/chat/completions", {"headers": {"Content-Type": "text/plain"}}),  # cors mode, still no preflight
        (rebound + "/api/chat", {"mode": "no-cors"}),
    ]
    before = refusals(dragoman)
    probes = []
    for url, init in attempts:
        probe = f"probe-{uuid.uuid4().hex}"
        probes.append(probe)
        body = chat_body(probe) if "generate" not in url else '{"model": "scripted", "stream": false, "prompt": "%s"}' % probe
        reply = page.evaluate(SEND, [url, {**init, "method": "POST", "body": body}])
        assert reply.get("type") == "opaque" or "Failed to fetch" in reply.get("error", ""), reply
    # A sandboxed frame posts with ``Origin: null``.
    probe = f"probe-{uuid.uuid4().hex}"
    probes.append(probe)
    frame = (
        "<script>fetch('%s/api/chat', {method: 'POST', mode: 'no-cors', body: %r})"
        ".then(() => parent.postMessage('sent', '*'), () => parent.postMessage('failed', '*'))</script>"
    ) % (base, chat_body(probe))
    sent = page.evaluate(
        """srcdoc => new Promise(done => {
            addEventListener("message", e => done(e.data));
            const frame = document.createElement("iframe");
            frame.sandbox = "allow-scripts";
            frame.srcdoc = srcdoc;
            document.body.append(frame);
        })""",
        frame,
    )
    assert sent == "sent"
    assert [p for p in probes if ScriptedBackend.ran(p)] == []
    assert refusals(dragoman) - before == len(probes)  # each one arrived, and was refused


def test_an_app_on_an_allow_listed_origin_still_works(page: Page, dragoman: RunningServer, page_server: int) -> None:
    page.goto(f"http://localhost:{page_server}/")
    probe = f"probe-{uuid.uuid4().hex}"
    url = f"http://127.0.0.1:{dragoman.port}/api/chat"
    reply = page.evaluate(SEND, [url, {"method": "POST", "headers": {"Content-Type": "application/json"}, "body": chat_body(probe)}])
    assert reply["status"] == 200 and '"done":true' in reply["body"], reply
    assert ScriptedBackend.ran(probe)


@pytest.fixture(scope="module")
def cors_off() -> Iterator[RunningServer]:
    with serve(config_from_yaml("server:\n  cors_origins: []\n" + MODELS)) as server:
        yield server


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_the_web_page_works_on_loopback_names_by_its_own_origin(page: Page, cors_off: RunningServer, host: str) -> None:
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"http://{host}:{cors_off.port}/ui")
    expect(page.locator('#models-table tr[data-model="scripted"]')).to_be_visible(timeout=30_000)
    expect(page.locator("#readiness")).to_have_text("ready", timeout=30_000)
    # The playground posts (with Origin: the page's own) through both dialects.
    for dialect in ("ollama", "openai"):
        page.select_option("#chat-dialect", dialect)
        page.fill("#chat-input", "hello")
        page.click("#chat-send")
        expect(page.locator("#chat-status")).to_have_text(re.compile(r"^done"), timeout=30_000)
    assert errors == []
