"""Loopback load test (issue #6): many concurrent streams through dragoman's upstream
backends, with every stream checked and the gateway's memory watched.

    .venv/bin/python bench/load_streams.py [--streams 200] [--rounds 3] [--chunks 32] [--delay 0.005]

Three processes on 127.0.0.1:

* a canned upstream (this script with ``--serve-upstream``): a raw asyncio HTTP/1.1 server
  that answers ``/v1/chat/completions`` with OpenAI SSE and ``/api/chat`` with Ollama
  NDJSON, ``--chunks`` content chunks ``--delay`` seconds apart, keep-alive, chunked;
* dragoman (``python -m dragoman.proxy.cli serve --config …``) serving ``canned-openai`` through
  the ``openai`` backend and ``canned-ollama`` through the ``ollama`` backend;
* this script as the client: each round opens ``--streams`` streaming requests at once,
  a quarter for each pair of client dialect and upstream dialect.

A stream passes when it answers 200, every frame is well formed (``data: <json>\\n\\n`` /
one JSON object a line), it carries no error, its text is exactly the canned text and it
ends with its terminator (``data: [DONE]`` / a ``done: true`` line). The gateway's RSS is
sampled every 20 ms: the baseline after a warm-up, the peak of each round, and the value
once the round is over and the process has settled.

Exit status 0 when every stream of every round passed, RSS settled within
``--rss-slack`` MiB of the baseline and grew by at most ``--rss-growth`` MiB after the
first round (a leak grows round after round; a high-water mark does not).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
MiB = 1024 * 1024

# -- the canned upstream -----------------------------------------------------------------------


def canned_words(chunks: int) -> list[str]:
    return [f"tok{i} " for i in range(chunks)]


def openai_frames(model: str, chunks: int) -> list[bytes]:
    def chunk(delta: dict[str, str], finish: str | None = None) -> bytes:
        body = {"id": "chatcmpl-canned", "object": "chat.completion.chunk", "created": 0, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    usage = {"id": "chatcmpl-canned", "object": "chat.completion.chunk", "created": 0, "model": model, "choices": [],
             "usage": {"prompt_tokens": 5, "completion_tokens": chunks, "total_tokens": 5 + chunks}}
    return [
        chunk({"role": "assistant", "content": ""}),
        *(chunk({"content": word}) for word in canned_words(chunks)),
        chunk({}, "stop"),
        b"data: " + json.dumps(usage).encode() + b"\n\n",
        b"data: [DONE]\n\n",
    ]


def ollama_frames(model: str, chunks: int) -> list[bytes]:
    def line(body: dict[str, object]) -> bytes:
        return json.dumps({"model": model, "created_at": "2026-01-01T00:00:00Z", **body}).encode() + b"\n"

    final = {"message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "stop",
             "prompt_eval_count": 5, "eval_count": chunks, "total_duration": 1000, "eval_duration": 900}
    return [
        *(line({"message": {"role": "assistant", "content": word}, "done": False}) for word in canned_words(chunks)),
        line(final),
    ]


async def serve_upstream(port: int, chunks: int, delay: float) -> None:
    replies = {
        "/v1/chat/completions": ("text/event-stream", openai_frames("canned", chunks)),
        "/api/chat": ("application/x-ndjson", ollama_frames("canned", chunks)),
    }

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # keep-alive: one request after another on this connection
                head = await reader.readuntil(b"\r\n\r\n")
                request_line, *header_lines = head.decode("latin-1").split("\r\n")
                path = request_line.split(" ")[1]
                headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines if h)}
                await reader.readexactly(int(headers.get("content-length", "0")))
                if path not in replies:
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    continue
                media_type, frames = replies[path]
                writer.write(f"HTTP/1.1 200 OK\r\nContent-Type: {media_type}\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
                for frame in frames:
                    writer.write(b"%x\r\n%s\r\n" % (len(frame), frame))
                    await writer.drain()
                    if delay:
                        await asyncio.sleep(delay)
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=2048)
    async with server:
        await server.serve_forever()


# -- processes -------------------------------------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def gateway_config(upstream: str, max_connections: int) -> str:
    return f"""\
server:
  log_level: warning
models:
  - name: canned-openai
    backend: openai
    base_url: {upstream}/v1
    model: canned
    max_connections: {max_connections}
  - name: canned-ollama
    backend: ollama
    base_url: {upstream}
    model: canned
    max_connections: {max_connections}
"""


def wait_live(url: str, process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{url}: process exited with {process.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    raise SystemExit(f"{url}: not up within {timeout:g}s")


# -- one stream --------------------------------------------------------------------------------

PATHS = {"openai": "/v1/chat/completions", "ollama": "/api/chat"}


@dataclass
class StreamResult:
    client: str
    upstream: str
    ok: bool
    problem: str = ""
    ttfb: float = 0.0  # seconds to the first body byte
    total: float = 0.0


def check_sse(raw: bytes) -> tuple[str, str]:
    """(text, problem) of an OpenAI stream; problem is "" when it is right."""
    if not raw.endswith(b"data: [DONE]\n\n"):
        return "", "no data: [DONE] terminator"
    text = []
    for frame in raw.split(b"\n\n")[:-2]:
        if not frame.startswith(b"data: ") or b"\n" in frame:
            return "", f"bad frame {frame[:60]!r}"
        payload = json.loads(frame[6:])
        if "error" in payload:
            return "", f"error event: {payload['error'].get('message')}"
        text += [c["delta"].get("content") or "" for c in payload["choices"]]
    return "".join(text), ""


def check_ndjson(raw: bytes) -> tuple[str, str]:
    if not raw.endswith(b"\n"):
        return "", "last line not terminated"
    lines = [json.loads(line) for line in raw[:-1].split(b"\n")]
    if any("error" in line for line in lines):
        return "", f"error line: {lines[-1].get('error')}"
    if not lines[-1].get("done") or any(line.get("done") for line in lines[:-1]):
        return "", "no final done line"
    return "".join(line["message"]["content"] for line in lines), ""


async def one_stream(http: httpx.AsyncClient, url: str, client: str, upstream: str, expected: str) -> StreamResult:
    body = {"model": f"canned-{upstream}", "messages": [{"role": "user", "content": "go"}], "stream": True}
    result = StreamResult(client, upstream, ok=False)
    started = time.perf_counter()
    try:
        async with http.stream("POST", url + PATHS[client], json=body) as response:
            raw = bytearray()
            async for chunk in response.aiter_raw():
                if not raw:
                    result.ttfb = time.perf_counter() - started
                raw += chunk
        result.total = time.perf_counter() - started
        if response.status_code != 200:
            result.problem = f"HTTP {response.status_code}: {bytes(raw[:200])!r}"
            return result
        text, result.problem = (check_sse if client == "openai" else check_ndjson)(bytes(raw))
        if not result.problem and text != expected:
            result.problem = f"text differs: {text[:40]!r}…"
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        result.problem = f"{type(exc).__name__}: {exc}"
    result.ok = not result.problem
    return result


# -- rounds ------------------------------------------------------------------------------------


@dataclass
class Round:
    name: str
    results: list[StreamResult]
    wall: float
    rss_peak: int
    rss_after: int
    connections_after: int  # TCP connections the gateway still holds once settled
    samples: list[int] = field(default_factory=list)


async def sample_rss(process: psutil.Process, into: list[int], stop: asyncio.Event) -> None:
    while not stop.is_set():
        into.append(process.memory_info().rss)
        try:
            await asyncio.wait_for(stop.wait(), 0.02)
        except TimeoutError:
            pass


async def run_round(name: str, url: str, streams: int, expected: str, gateway: psutil.Process, settle: float) -> Round:
    pairs = [(c, u) for c in ("openai", "ollama") for u in ("openai", "ollama")]
    limits = httpx.Limits(max_connections=streams + 8, max_keepalive_connections=streams + 8)
    samples: list[int] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_rss(gateway, samples, stop))
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(60.0)) as http:
        started = time.perf_counter()
        results = await asyncio.gather(
            *(one_stream(http, url, *pairs[i % len(pairs)], expected) for i in range(streams))
        )
        wall = time.perf_counter() - started
    await asyncio.sleep(settle)  # idle upstream connections expire, buffers are freed
    stop.set()
    await sampler
    connections = len(gateway.net_connections(kind="tcp")) - 1  # less its listening socket
    return Round(name, list(results), wall, max(samples), gateway.memory_info().rss, connections, samples)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def print_report(args: argparse.Namespace, baseline: int, rounds: list[Round]) -> bool:
    print(f"\ndragoman load: {args.streams} concurrent streams a round, {args.chunks} chunks each "
          f"({args.delay * 1000:g} ms apart upstream), {os.cpu_count()} CPUs, loopback\n")
    head = f"{'round':<8} {'streams':>7} {'ok':>5} {'errors':>6} {'wall s':>7} {'ttfb p50 ms':>11} {'ttfb p95 ms':>11} " \
           f"{'total p50 ms':>12} {'total p95 ms':>12} {'total max ms':>12} {'chunks/s':>9} {'RSS peak MiB':>12} {'RSS after MiB':>13} " \
           f"{'conns after':>11}"
    print(head)
    print("-" * len(head))
    for r in rounds:
        ok = sum(x.ok for x in r.results)
        ttfb = [x.ttfb * 1000 for x in r.results if x.ok] or [0.0]
        total = [x.total * 1000 for x in r.results if x.ok] or [0.0]
        print(f"{r.name:<8} {len(r.results):>7} {ok:>5} {len(r.results) - ok:>6} {r.wall:>7.2f} "
              f"{statistics.median(ttfb):>11.1f} {percentile(ttfb, 0.95):>11.1f} {statistics.median(total):>12.1f} "
              f"{percentile(total, 0.95):>12.1f} {max(total):>12.1f} {len(r.results) * args.chunks / r.wall:>9.0f} "
              f"{r.rss_peak / MiB:>12.1f} {r.rss_after / MiB:>13.1f} {r.connections_after:>11}")
    print()
    by_pair: dict[tuple[str, str], list[StreamResult]] = {}
    for r in rounds:
        for x in r.results:
            by_pair.setdefault((x.client, x.upstream), []).append(x)
    print(f"{'client dialect':<15} {'upstream backend':<17} {'streams':>7} {'ok':>5} {'total p50 ms':>12}")
    for (client, upstream), results in sorted(by_pair.items()):
        ok = [x.total * 1000 for x in results if x.ok] or [0.0]
        print(f"{client:<15} {upstream:<17} {len(results):>7} {sum(x.ok for x in results):>5} {statistics.median(ok):>12.1f}")
    problems = [x for r in rounds for x in r.results if not x.ok]
    for x in problems[:10]:
        print(f"  FAILED {x.client} via {x.upstream}: {x.problem}")
    final = rounds[-1].rss_after
    peak = max(r.rss_peak for r in rounds)
    # A leak grows round after round; a high-water mark is reached in the first one.
    growth = final - rounds[0].rss_after
    settled = final - baseline <= args.rss_slack * MiB and growth <= args.rss_growth * MiB
    print(f"\nRSS of dragoman: baseline {baseline / MiB:.1f} MiB, peak {peak / MiB:.1f} MiB, "
          f"after {final / MiB:.1f} MiB ({(final - baseline) / MiB:+.1f} MiB over the baseline, slack "
          f"{args.rss_slack:g}; {growth / MiB:+.1f} MiB since round 1, slack {args.rss_growth:g}): "
          f"{'settled' if settled else 'NOT settled'}")
    streams_ok = not problems
    print(f"streams: {sum(len(r.results) for r in rounds) - len(problems)} ok, {len(problems)} failed; "
          f"every stream ended with its terminator: {'yes' if streams_ok else 'no'}")
    return streams_ok and settled


async def main_async(args: argparse.Namespace) -> int:
    upstream_port, gateway_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    workdir = Path(tempfile.mkdtemp(prefix="dragoman-load-"))
    config = workdir / "gateway.yaml"
    config.write_text(gateway_config(f"http://127.0.0.1:{upstream_port}", max(args.streams, 100)))
    upstream = subprocess.Popen(
        [sys.executable, __file__, "--serve-upstream", str(upstream_port), "--chunks", str(args.chunks), "--delay", str(args.delay)],
        cwd=ROOT, env=env,
    )
    log = (workdir / "gateway.log").open("wb")
    gateway = subprocess.Popen(
        [sys.executable, "-m", "dragoman.proxy.cli", "serve", "--config", str(config), "--port", str(gateway_port)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{gateway_port}"
    try:
        wait_live(f"http://127.0.0.1:{upstream_port}/", upstream)
        wait_live(url + "/health/live", gateway)
        process = psutil.Process(gateway.pid)
        expected = "".join(canned_words(args.chunks))
        warm = await run_round("warm-up", url, 8, expected, process, args.settle)
        if not all(x.ok for x in warm.results):
            print("warm-up failed:", [x.problem for x in warm.results if not x.ok])
            return 1
        baseline = process.memory_info().rss
        rounds = [await run_round(f"{i + 1}", url, args.streams, expected, process, args.settle) for i in range(args.rounds)]
        passed = print_report(args, baseline, rounds)
        log.flush()
        noisy = [line for line in (workdir / "gateway.log").read_text().splitlines() if "[warning" in line or "[error" in line]
        print(f"gateway log: {len(noisy)} warning/error lines" + "".join(f"\n  {line[:200]}" for line in noisy[:5]))
        return 0 if passed and not noisy else 1
    finally:
        for child in (gateway, upstream):
            child.terminate()
        for child in (gateway, upstream):
            try:
                child.wait(timeout=15)
            except subprocess.TimeoutExpired:
                child.kill()
        log.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=200, help="concurrent streams a round (default 200)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, to tell a leak from a high-water mark (default 3)")
    parser.add_argument("--chunks", type=int, default=32, help="content chunks per stream (default 32)")
    parser.add_argument("--delay", type=float, default=0.005, help="seconds between upstream chunks (default 0.005)")
    parser.add_argument(
        "--settle", type=float, default=10.0,
        help="idle seconds after a round before RSS is read (default 10: pooled upstream connections "
        "expire after 4 s idle, and the pool sweeps them at about that pace)",
    )
    parser.add_argument("--rss-slack", type=float, default=16.0, help="MiB RSS may stay above the baseline (default 16)")
    parser.add_argument("--rss-growth", type=float, default=4.0, help="MiB RSS may grow after round 1 (default 4)")
    parser.add_argument("--serve-upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream:
        try:
            asyncio.run(serve_upstream(args.serve_upstream, args.chunks, args.delay))
        except KeyboardInterrupt:
            pass
        return 0
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    raise SystemExit(main())
