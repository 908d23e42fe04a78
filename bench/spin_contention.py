"""``spin``: auto against false and true, alone and beside other work on the cores.

    DRAGOMAN_HOME=.dragoman-test-home .venv/bin/python bench/spin_contention.py [--rounds 3]

Three ``dragoman serve`` processes, one per ``spin`` value, each with two chat entries of
the default model (two workers) and the embedding model. Every round measures, for each
server in turn, single-stream decode tok/s of the first chat entry (256 new tokens,
greedy, prefill left out):

1. alone;
2. beside embeddings: a client embedding batches of 32 ~100-token texts meanwhile (and
   the embeddings' rate, texts/s);
3. beside the second model: both entries streaming at once (the mean of the two);
4. beside another process busy on one core (a Python busy loop).

Spinning threads are fastest alone and collapse beside other work (see
dragoman/backends/onnx/worker/core_watch.py); ``auto`` is meant to be as fast as ``true`` alone and as
``false`` beside work. Figures are medians over rounds; ratios are medians of per-round
ones. ``--out FILE`` also writes them as JSON.
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
from pathlib import Path

import httpx
import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from onnx_decode import free_port, start_server  # noqa: E402

MODES = {"auto": "auto", "false": "false", "true": "true"}
MODELS = ("smollm2:135m", "smollm2:second")
PROMPT = "Count from one to five hundred in words, one number per line, without skipping any."
TEXTS = [f"document {i}: " + "the quick brown fox jumps over the lazy dog " * 10 for i in range(32)]
HOG = "import time\nend = time.time() + 600\nwhile time.time() < end: pass"


def config_for(spin: str, folder: Path) -> Path:
    home = os.environ.get("DRAGOMAN_HOME", "~/.cache/dragoman")
    chat = "\n".join(
        f"""  - name: {name}
    backend: onnx
    path: {home}/models/smollm2-135m-instruct-int4-cpu
    provider: cpu
    context_length: 2048
    spin: {spin}"""
        for name in MODELS
    )
    text = f"""server:
  host: 127.0.0.1
models:
{chat}
  - name: all-minilm
    backend: onnx
    task: embed
    path: {home}/models/all-minilm-l6-v2-onnx
    provider: cpu
"""
    path = folder / f"spin-{spin}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


async def decode_tps(client: httpx.AsyncClient, model: str, tokens: int) -> float:
    body = {"model": model, "stream": True, "temperature": 0, "max_tokens": tokens,
            "messages": [{"role": "user", "content": PROMPT}]}  # fmt: skip
    first = end = None
    count = 0
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in msgspec.json.decode(line[6:])["choices"]:
                if choice["delta"].get("content"):
                    count += 1
                    first = first or time.monotonic()
                    end = time.monotonic()
    assert first is not None and end is not None and count > 1
    return (count - 1) / (end - first)


async def embed_until(client: httpx.AsyncClient, stop: asyncio.Event) -> tuple[int, float]:
    began, texts = time.monotonic(), 0
    while not stop.is_set():
        response = await client.post("/api/embed", json={"model": "all-minilm", "input": TEXTS})
        response.raise_for_status()
        texts += len(TEXTS)
    return texts, time.monotonic() - began


async def measure(client: httpx.AsyncClient, tokens: int) -> dict[str, float]:
    out = {"alone": await decode_tps(client, MODELS[0], tokens)}
    stop = asyncio.Event()
    embedding = asyncio.create_task(embed_until(client, stop))
    await asyncio.sleep(0.5)
    out["beside embeddings"] = await decode_tps(client, MODELS[0], tokens)
    stop.set()
    texts, seconds = await embedding
    out["embeddings meanwhile (texts/s)"] = texts / seconds
    both = await asyncio.gather(*(decode_tps(client, model, tokens) for model in MODELS))
    out["beside the second model"] = statistics.mean(both)
    hog = subprocess.Popen([sys.executable, "-c", HOG])
    try:
        await asyncio.sleep(0.5)
        out["beside a busy core"] = await decode_tps(client, MODELS[0], tokens)
    finally:
        hog.kill()
        hog.wait()
    return out


async def run(args: argparse.Namespace, ports: dict[str, int]) -> dict[str, list[dict[str, float]]]:
    clients = {mode: httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=600) for mode, port in ports.items()}
    rounds: dict[str, list[dict[str, float]]] = {mode: [] for mode in ports}
    try:
        for client in clients.values():  # load every model, outside the measurement
            await asyncio.gather(*(decode_tps(client, model, 8) for model in MODELS))
            (await client.post("/api/embed", json={"model": "all-minilm", "input": TEXTS[:2]})).raise_for_status()
        for number in range(args.rounds):
            order = list(ports)[number % len(ports):] + list(ports)[: number % len(ports)]
            for mode in order:
                rounds[mode].append(await measure(clients[mode], args.tokens))
                await asyncio.sleep(1)  # the cores quiet again between servers
            print(f"  round {number + 1}: " + "; ".join(
                f"{mode} " + ", ".join(f"{v:.0f}" for v in rounds[mode][-1].values()) for mode in ports), flush=True)  # fmt: skip
    finally:
        for client in clients.values():
            await client.aclose()
    return rounds


def render(rounds: dict[str, list[dict[str, float]]]) -> str:
    rows = list(rounds["auto"][0])
    lines = ["| decode tok/s (first chat entry) | spin: auto | spin: false | spin: true | auto ÷ false | auto ÷ true |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for row in rows:
        median = {mode: statistics.median(r[row] for r in rounds[mode]) for mode in rounds}
        ratio = {other: statistics.median(a[row] / b[row] for a, b in zip(rounds["auto"], rounds[other], strict=True))
                 for other in ("false", "true")}  # fmt: skip
        lines.append(f"| {row} | {median['auto']:.0f} | {median['false']:.0f} | {median['true']:.0f} "
                     f"| {ratio['false']:.2f}× | {ratio['true']:.2f}× |")  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=256, help="new tokens per measured stream")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    began = time.monotonic()
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    servers: dict[str, subprocess.Popen[bytes]] = {}
    ports: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as folder:
        try:
            for mode in MODES:
                ports[mode] = free_port()
                servers[mode] = start_server(ports[mode], config_for(mode, Path(folder)))
            rounds = asyncio.run(run(args, ports))
        finally:
            for server in servers.values():
                server.terminate()
                server.wait(30)
    print(f"\n`python bench/spin_contention.py {' '.join(sys.argv[1:])}`: {args.rounds} rounds, "
          f"load average {load} at the start, {time.monotonic() - began:.0f} s in all\n")  # fmt: skip
    print(render(rounds))
    if args.out:
        args.out.write_text(json.dumps(rounds) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
