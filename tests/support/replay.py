"""A test-only HTTP/1.1 server on 127.0.0.1 that replays recorded upstream replies.

It plays the failures a real model cannot produce on demand: fragmented parallel tool
calls, a connection dropped mid-stream, a server that stalls, 429/503, malformed
chunks. A reply is chosen by the ``model`` of the request body (or by the path for a
GET) and sent the way real servers send streams: chunked, one event per chunk.
Raw asyncio, so that what goes over the socket is exactly what the test says.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.stand_ins import reset_between_tests

TRANSCRIPTS = Path(__file__).resolve().parents[1] / "upstream" / "transcripts"
_CONTENT_TYPES = {".sse": "text/event-stream", ".ndjson": "application/x-ndjson", ".json": "application/json"}
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}


@dataclass(frozen=True)
class Reply:
    """What to send. ``transcript`` names a file under ``tests/upstream/transcripts``;
    ``whole`` one sent instead when the request asked for no stream (without it the
    stream is sent anyway, as some servers do)."""

    transcript: str | None = None
    whole: str | None = None
    body: bytes = b""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_headers: float = 0.0  # seconds of silence before the status line
    delay_between: float = 0.0  # seconds between events
    stall_after: int | None = None  # after this many events, go silent for ``stall`` seconds
    stall: float = 0.0
    abort_after: int | None = None  # after this many events, close the socket mid-body
    burst: bool = False  # every event in one write, as a server that got ahead of its reader
    repeat: int = 1  # ``body`` sent this many times (one object: a huge reply costs the server nothing)
    tail: bytes = b""  # sent once after the repeated body
    close_after: bool = False  # close the connection once the reply is sent

    def events(self) -> list[bytes]:
        """The body cut where a real server flushes: SSE at blank lines, NDJSON at lines."""
        if self.transcript is None:
            return ([self.body] * self.repeat if self.body else []) + ([self.tail] if self.tail else [])
        text = (TRANSCRIPTS / self.transcript).read_bytes()
        if self.transcript.endswith(".sse"):
            pieces = text.split(b"\n\n")
            return [p + b"\n\n" for p in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])
        if self.transcript.endswith(".ndjson"):
            return text.splitlines(keepends=True)
        return [text]

    def content_type(self) -> str:
        suffix = Path(self.transcript).suffix if self.transcript else ".json"
        return _CONTENT_TYPES.get(suffix, "application/octet-stream")


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def streams(self) -> bool:
        """Whether the client asked for a stream; Ollama's default is yes, OpenAI's no."""
        return bool(self.json().get("stream", self.path.endswith("/api/chat")))


class ReplayServer:
    """Started by :func:`replay_server`; ``script`` maps a model name or a GET path to a
    reply, or to a list of replies played in turn (the last one repeats)."""

    def __init__(self, script: dict[str, Reply | list[Reply]]) -> None:
        self.script = script
        self.received: list[Received] = []
        self.connections = 0
        self.disconnects = 0  # clients that left before their reply was complete
        self.port = 0
        self._turns: dict[str, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(self) -> None:
        """Before each test (tests/support/stand_ins.py): nothing received, every script
        from its first reply. New objects, not cleared ones: a reply an earlier test left
        running writes to its own."""
        self.received, self.connections, self.disconnects, self._turns = [], 0, 0, {}

    def requests_for(self, model: str) -> list[Received]:
        return [r for r in self.received if r.method == "POST" and r.json().get("model") == model]

    def _pick(self, key: str) -> Reply:
        replies = self.script.get(key)
        if replies is None:
            return Reply(body=json.dumps({"error": f"replay: nothing scripted for '{key}'"}).encode(), status=404)
        if isinstance(replies, Reply):
            return replies
        turn = self._turns.get(key, 0)
        self._turns[key] = turn + 1
        return replies[min(turn, len(replies) - 1)]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                self.received.append(request)
                key = request.path if request.method == "GET" else str(request.json().get("model"))
                reply = self._pick(key)
                if reply.whole and not request.streams():
                    reply = Reply(reply.whole, status=reply.status, headers=reply.headers)
                if reply.close_after:
                    await self._send(reply, reader, writer)
                    return
                if not await self._send(reply, reader, writer):
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except asyncio.CancelledError:  # shutting down; asyncio would log a cancelled handler
            return
        finally:
            writer.close()

    async def _send(self, reply: Reply, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Plays ``reply``; False when the connection must not be used again."""
        await asyncio.sleep(reply.delay_headers)
        head = [f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}",
                f"Content-Type: {reply.content_type()}", "Transfer-Encoding: chunked"]
        head += [f"{name}: {value}" for name, value in reply.headers.items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
        if reply.burst:  # one write: the reader gets it all at once
            writer.write(b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in reply.events()) + b"0\r\n\r\n")
            await writer.drain()
            return True
        for sent, event in enumerate(reply.events()):
            if sent and reply.delay_between:
                await asyncio.sleep(reply.delay_between)
            if sent == reply.stall_after:
                await asyncio.sleep(reply.stall)
            if sent == reply.abort_after:
                writer.transport.abort()
                return False
            if reader.at_eof():
                self.disconnects += 1
                return False
            writer.write(b"%x\r\n%s\r\n" % (len(event), event))
            try:
                await writer.drain()
            except ConnectionError:
                self.disconnects += 1
                return False
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


async def _read_request(reader: asyncio.StreamReader) -> Received | None:
    line = await reader.readline()
    if not line:
        return None
    method, path, _ = line.decode("latin-1").split(" ", 2)
    headers: dict[str, str] = {}
    while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = header.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Received(method, path, headers, body)


@contextmanager
def replay_server(script: dict[str, Reply | list[Reply]]) -> Iterator[ReplayServer]:
    """A :class:`ReplayServer` on a free port, in a thread with its own event loop."""
    server = ReplayServer(script)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, asyncio.AbstractServer] = {}

    async def start() -> None:
        holder["server"] = await asyncio.start_server(server._serve, "127.0.0.1", 0)
        server.port = holder["server"].sockets[0].getsockname()[1]
        ready.set()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        loop.run_forever()

    thread = threading.Thread(target=run, name="replay-upstream", daemon=True)
    thread.start()
    if not ready.wait(10):
        raise RuntimeError("replay server did not start")
    server._loop = loop
    try:
        with reset_between_tests(server):
            yield server
    finally:
        async def stop() -> None:
            holder["server"].close()
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
