"""Remote image URLs: refused by default; when enabled, only public or listed hosts."""

from __future__ import annotations

import base64
import http.server
import threading
from collections.abc import Iterator

import httpx
import pytest

from tests.support.scripted import ScriptedBackend
from tests.support.server import RunningServer, config_from_yaml, serve

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


class ImageHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the stdlib's spelling
        body = PNG if self.path == "/dot.png" else PNG * 1000 if self.path == "/big.png" else b"not an image"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture(scope="module")
def image_host() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ImageHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def ask(server: RunningServer, url: str) -> httpx.Response:
    content = [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": url}}]
    return httpx.post(
        server.url + "/v1/chat/completions",
        json={"model": "scripted", "messages": [{"role": "user", "content": content}]},
    )


def scripted_with(image_fetch: str) -> str:
    return f"server:\n  image_fetch: {image_fetch}\nmodels:\n  - {{name: scripted, backend: 'tests.support.scripted:ScriptedBackend'}}\n"


def test_off_by_default(scripted_server: RunningServer, image_host: str) -> None:
    r = ask(scripted_server, image_host + "/dot.png")
    assert r.status_code == 400
    assert "remote image URLs are not fetched" in r.json()["error"]["message"]


def test_enabled_refuses_loopback_unless_listed(image_host: str) -> None:
    with serve(config_from_yaml(scripted_with("{enabled: true}"))) as server:
        r = ask(server, image_host + "/dot.png")
    assert r.status_code == 400
    assert "non-public address (127.0.0.1)" in r.json()["error"]["message"]


def test_listed_host_is_fetched_with_limits(image_host: str) -> None:
    with serve(config_from_yaml(scripted_with("{enabled: true, allowed_hosts: [127.0.0.1], max_bytes: 10000}"))) as server:
        assert ask(server, image_host + "/dot.png").status_code == 200
        image = ScriptedBackend.last_request.messages[0].images[0]
        assert (image.data, image.mime_type) == (PNG, "image/png")
        too_big = ask(server, image_host + "/big.png")
        assert too_big.status_code == 400 and "larger than 10000 bytes" in too_big.json()["error"]["message"]
        not_image = ask(server, image_host + "/page.html")
        assert "not a PNG" in not_image.json()["error"]["message"]
        other = ask(server, "http://localhost:9/x.png")
        assert "not in server.image_fetch.allowed_hosts" in other.json()["error"]["message"]
