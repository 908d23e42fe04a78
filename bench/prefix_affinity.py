"""Prefix-affinity routing against today's least-loaded balancing (issue 28 item 4),
side by side in one run, through a real ``dragoman serve`` (its default server processes).

Three stand-in OpenAI-compatible endpoints on 127.0.0.1 keep a prefix cache as vLLM and
llama-server do: an LRU of the turns they have answered (each turn's messages and its
reply); a request *hits* when its conversation up to its new message is cached there (an
older turn's shorter prefix counts as a miss); a miss costs a longer "prefill" (sleep) than
a hit. Two gateway entries name the same three endpoints, one
with ``affinity: prefix`` (the default), one with ``affinity: none``. The same load runs
against each — CONVERSATIONS conversations of TURNS turns, CONCURRENCY at a time — and the
run prints, for each, the hit rate over the turns that could hit (turn 2 onwards), the
requests per endpoint (spread: max / mean) and the median latency.

    python bench/prefix_affinity.py [--conversations 48] [--turns 4] [--concurrency 8]
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
from collections import OrderedDict
from pathlib import Path

import httpx
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from cpu_info import this_cpu  # noqa: E402

CACHE_ENTRIES = 64  # conversations an endpoint keeps (an LRU, as a prefix cache evicts)
HIT_SECONDS, MISS_SECONDS = 0.005, 0.030


class StandIn:
    """One endpoint with a prefix cache, counting what it was asked and what hit."""

    def __init__(self) -> None:
        self.cache: OrderedDict[tuple[tuple[str, str], ...], None] = OrderedDict()
        self.requests = 0
        self.hits: dict[str, int] = {}
        self.could_hit: dict[str, int] = {}

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        seq = tuple((m["role"], m["content"]) for m in body["messages"])
        hit = seq[:-1] in self.cache  # the previous turn, with its reply, is cached here
        if hit:
            self.cache.move_to_end(seq[:-1])
        model = body["model"]
        self.requests += 1
        if len(seq) > 1:
            self.could_hit[model] = self.could_hit.get(model, 0) + 1
            self.hits[model] = self.hits.get(model, 0) + hit
        await asyncio.sleep(HIT_SECONDS if hit else MISS_SECONDS)
        reply = f"reply {len(seq)}"
        self.cache[seq + (("assistant", reply),)] = None
        while len(self.cache) > CACHE_ENTRIES:
            self.cache.popitem(last=False)
        return web.json_response({
            "id": "x", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": len(seq), "completion_tokens": 2, "total_tokens": len(seq) + 2},
        })


async def start_stand_in(stand_in: StandIn) -> tuple[web.AppRunner, int]:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", stand_in.chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


async def conversation(client: httpx.AsyncClient, url: str, model: str, n: int, turns: int, latencies: list[float]) -> None:
    messages = [{"role": "user", "content": f"conversation {n}: let us plan something long"}]
    for turn in range(turns):
        started = time.perf_counter()
        reply = await client.post(url, json={"model": model, "messages": messages})
        latencies.append(time.perf_counter() - started)
        reply.raise_for_status()
        messages += [{"role": "assistant", "content": reply.json()["choices"][0]["message"]["content"]},
                     {"role": "user", "content": f"turn {turn + 1}"}]


async def load(url: str, model: str, conversations: int, turns: int, concurrency: int) -> list[float]:
    latencies: list[float] = []
    gate = asyncio.Semaphore(concurrency)

    async def one(n: int) -> None:
        async with gate:
            await conversation(client, url, model, n, turns, latencies)

    async with httpx.AsyncClient(timeout=30) as client:
        await asyncio.gather(*(one(n) for n in range(conversations)))
    return latencies


def serve(config: Path, port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, "-m", "dragoman", "serve", "--config", str(config), "--port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health/live", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit("dragoman did not start within 60 s")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=48)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--write", action="store_true", help="also write bench/results/prefix_affinity.json")
    args = parser.parse_args()
    stand_ins = [StandIn() for _ in range(3)]
    started = [await start_stand_in(s) for s in stand_ins]
    urls = ", ".join(f"http://127.0.0.1:{port}/v1" for _, port in started)
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "dragoman.yaml"
        config.write_text(f"models:\n  - {{name: prefix, backend: openai, endpoints: [{urls}]}}\n"
                          f"  - {{name: none, backend: openai, endpoints: [{urls}], affinity: none}}\n")
        port = 18000 + os.getpid() % 1000
        process = await asyncio.to_thread(serve, config, port)
        try:
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            results = {}
            for model in ("prefix", "none"):
                before = [s.requests for s in stand_ins]
                latencies = await load(url, model, args.conversations, args.turns, args.concurrency)
                per_endpoint = [s.requests - b for s, b in zip(stand_ins, before)]
                hits = sum(s.hits.get(model, 0) for s in stand_ins)
                could = sum(s.could_hit.get(model, 0) for s in stand_ins)
                results[model] = {
                    "hit_rate": hits / could, "per_endpoint": per_endpoint,
                    "spread": max(per_endpoint) / statistics.mean(per_endpoint),
                    "median_ms": statistics.median(latencies) * 1000,
                }
        finally:
            process.terminate()
            process.wait(timeout=30)
    for runner, _ in started:
        await runner.cleanup()
    print(f"CPU: {this_cpu().describe()}")
    print(f"{args.conversations} conversations x {args.turns} turns, {args.concurrency} at a time, 3 endpoints "
          f"(LRU of {CACHE_ENTRIES} conversations each; hit {HIT_SECONDS * 1000:g} ms, miss {MISS_SECONDS * 1000:g} ms)")
    print(f"{'balancing':<10} {'hit rate':>9} {'requests per endpoint':>24} {'spread':>7} {'median ms':>10}")
    for model, r in results.items():
        print(f"{model:<10} {r['hit_rate']:>9.1%} {str(r['per_endpoint']):>24} {r['spread']:>7.2f} {r['median_ms']:>10.1f}")
    a, b = results["prefix"], results["none"]
    print(f"prefix vs none: hit rate {a['hit_rate'] / max(b['hit_rate'], 1e-9):.2f}x, median latency {a['median_ms'] / b['median_ms']:.2f}x, "
          f"spread {a['spread']:.2f} vs {b['spread']:.2f}")
    if args.write:
        out = ROOT / "bench" / "results" / "prefix_affinity.json"
        out.write_text(json.dumps({"cpu": this_cpu().describe(), "args": vars(args), "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
