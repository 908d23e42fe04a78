"""What the stand-in registry (tests/support/ollama_registry.py) and the stand-in Hugging
Face Hub (tests/support/hf_endpoint.py) both do as a blob store: serve bytes with
``Range`` (206, ``Content-Range``), and misbehave on request — drop the connection part way
through a body once, or flip a blob's last byte; and run aiohttp apps on free ports of
127.0.0.1 in a thread of their own."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aiohttp import web

from tests.support.server import free_port

CHUNK = 1 << 20


class StoredBytes:
    """Bytes in memory or a file on disk (a real model, too big to hold), with their sha256."""

    def __init__(self, data: bytes | Path) -> None:
        self.data = data
        self.size = len(data) if isinstance(data, bytes) else data.stat().st_size
        self.sha256 = hashlib.sha256(data).hexdigest() if isinstance(data, bytes) else _file_sha256(data)

    def read(self, start: int, end: int) -> bytes:
        if isinstance(self.data, bytes):
            return self.data[start:end]
        with self.data.open("rb") as file:
            file.seek(start)
            return file.read(end - start)


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def logged(request: web.Request) -> str:
    """A request as the stand-ins record it: method, path and the Range asked for."""
    ranged = request.headers.get("Range")
    return f"{request.method} {request.path}" + (f" ({ranged})" if ranged else "")


async def send_ranged(
    request: web.Request, stored: StoredBytes, *, corrupt: bool = False, cut: int | None = None, pace: float = 0.0
) -> web.StreamResponse:
    """``stored`` from the ``Range`` start the request asks (``bytes=N-``), 206 then; the
    last byte flipped when ``corrupt``; the connection aborted once ``cut`` bytes of the
    blob (counted from its start) have gone out; ``pace`` seconds between chunks (a slow
    link, so that downloads overlap)."""
    start = 0
    if (ranged := request.headers.get("Range", "")).startswith("bytes="):
        start = int(ranged.removeprefix("bytes=").split("-")[0])
    headers = {"Content-Type": "application/octet-stream", "Content-Length": str(stored.size - start), "Accept-Ranges": "bytes"}
    if start:
        headers["Content-Range"] = f"bytes {start}-{stored.size - 1}/{stored.size}"
    reply = web.StreamResponse(status=206 if start else 200, headers=headers)
    await reply.prepare(request)
    if request.method == "HEAD":
        return reply
    for offset in range(start, stored.size, CHUNK):
        chunk = stored.read(offset, min(offset + CHUNK, stored.size))
        if corrupt and offset + len(chunk) == stored.size:
            chunk = chunk[:-1] + bytes([chunk[-1] ^ 0xFF])
        if cut is not None and offset + len(chunk) > cut:
            await reply.write(chunk[: max(cut - offset, 0)])
            await asyncio.sleep(0.05)
            assert request.transport is not None
            request.transport.abort()  # the connection drops part way through the body
            return reply
        await reply.write(chunk)
        if pace:
            await asyncio.sleep(pace)
    await reply.write_eof()
    return reply


@contextmanager
def running_apps(name: str, *apps: web.Application) -> Iterator[list[str]]:
    """Each app on a free port of 127.0.0.1 (their URLs, in order), in one thread."""
    ports = [free_port() for _ in apps]
    loop = asyncio.new_event_loop()
    runners = [web.AppRunner(app, access_log=None) for app in apps]
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        for runner, port in zip(runners, ports, strict=True):
            loop.run_until_complete(runner.setup())
            loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, name=f"{name}-{ports[0]}", daemon=True)
    thread.start()
    assert started.wait(10), f"the stand-in {name} did not start"
    try:
        yield [f"http://127.0.0.1:{port}" for port in ports]
    finally:
        for runner in runners:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
