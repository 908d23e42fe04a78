"""The pooled upstream client is shared by every caller: it must keep no cookies."""

from __future__ import annotations

import http.server
import threading

import pytest

from dragoman.backends.upstream.clients import new_client


class CookieSetter(http.server.BaseHTTPRequestHandler):
    seen: list[str | None] = []  # class-level: the server makes a handler per request; emptied by the test

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's spelling
        type(self).seen.append(self.headers.get("Cookie"))
        self.send_response(200)
        self.send_header("Set-Cookie", "session=caller-a; Path=/")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        return None


@pytest.mark.asyncio
async def test_cookies_from_one_reply_never_reach_the_next_request() -> None:
    CookieSetter.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), CookieSetter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = new_client(4)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        for _ in range(3):
            async with client.get(url) as response:
                assert response.status == 200
    finally:
        await client.close()
        server.shutdown()
    assert CookieSetter.seen == [None, None, None]
