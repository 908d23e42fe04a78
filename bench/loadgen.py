"""A closed-loop HTTP/1.1 load generator: ``--concurrency`` keep-alive connections, each
sending the same POST again as soon as the previous reply has fully arrived.

Raw asyncio protocol (uvloop when installed) so that the generator costs as little
CPU as a Python one can; it runs in its own process. Prints one JSON object:
requests, errors, seconds, req_per_s, p50_ms, p99_ms.

    python bench/loadgen.py --url http://127.0.0.1:8100/v1/chat/completions \\
        --body '{"model":"bench","messages":[{"role":"user","content":"hi"}]}' -c 64 -d 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from urllib.parse import urlsplit


class Connection(asyncio.Protocol):
    """One keep-alive connection that knows when a reply is complete: by
    ``content-length``, or by the last chunk of a chunked body."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.done: asyncio.Future[int] | None = None
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("connection closed mid-reply"))
        if not self.closed.done():
            self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        status = self._complete()
        if status is not None and self.done is not None and not self.done.done():
            self.done.set_result(status)

    def _complete(self) -> int | None:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return None
        head = bytes(self.buffer[:end]).lower()
        status = int(head[9:12])
        for line in head.split(b"\r\n"):
            if line.startswith(b"content-length:"):
                if len(self.buffer) >= end + 4 + int(line[15:]):
                    return status
                return None
        if b"transfer-encoding: chunked" in head:
            return status if self.buffer.endswith(b"\r\n0\r\n\r\n") else None
        return None

    async def exchange(self, request: bytes) -> int:
        assert self.transport is not None
        self.buffer.clear()
        self.done = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return await self.done


class Window:
    """The measured stretch: it opens once the warm-up has passed *and* every connection
    has finished a request (slow targets at high concurrency need longer than any fixed
    warm-up), and closes ``duration`` seconds later."""

    def __init__(self, concurrency: int, warmup: float, duration: float) -> None:
        self.pending = concurrency
        self.warm_from = time.perf_counter() + warmup
        self.duration = duration
        self.opens: float | None = None
        self.closes: float | None = None

    def first_done(self) -> None:
        self.pending -= 1

    def tick(self, now: float) -> None:
        if self.opens is None and self.pending <= 0 and now >= self.warm_from:
            self.opens, self.closes = now, now + self.duration

    def over(self, now: float) -> bool:
        return self.closes is not None and now >= self.closes


async def worker(host: str, port: int, request: bytes, window: Window, latencies: list[float], errors: list[str]) -> None:
    loop = asyncio.get_running_loop()
    conn: Connection | None = None
    finished_one = False
    while not window.over(time.perf_counter()):
        if conn is None or conn.closed.done():
            _, conn = await loop.create_connection(Connection, host, port)
        started = time.perf_counter()
        try:
            status = await conn.exchange(request)
        except ConnectionError as exc:
            errors.append(str(exc))
            conn = None
            continue
        finished = time.perf_counter()
        if not finished_one:
            finished_one = True
            window.first_done()
        window.tick(finished)
        if status != 200:
            errors.append(f"HTTP {status}")
        elif window.opens is not None and finished > window.opens and not window.over(finished):
            latencies.append(finished - started)  # every reply completed inside the window
    if conn is not None and conn.transport is not None:
        conn.transport.close()


async def run(url: str, body: bytes, concurrency: int, duration: float, warmup: float, auth: str) -> dict[str, object]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    request = (
        f"POST {parts.path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Authorization: {auth}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    latencies: list[float] = []
    errors: list[str] = []
    window = Window(concurrency, warmup, duration)
    await asyncio.gather(*(worker(host, port, request, window, latencies, errors) for _ in range(concurrency)))
    latencies.sort()
    n = len(latencies)
    return {
        "requests": n,
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "seconds": duration,
        "req_per_s": n / duration,
        "p50_ms": statistics.median(latencies) * 1000 if n else None,
        "p99_ms": latencies[min(n - 1, int(n * 0.99))] * 1000 if n else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--body", required=True)
    parser.add_argument("-c", "--concurrency", type=int, default=1)
    parser.add_argument("-d", "--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--auth", default="Bearer bench", help="the Authorization header sent")
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    result = asyncio.run(run(args.url, args.body.encode(), args.concurrency, args.duration, args.warmup, args.auth))
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
