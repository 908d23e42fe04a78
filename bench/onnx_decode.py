"""ONNX backend benchmark (issue #3): dragoman over HTTP against a raw onnxruntime-genai loop.

    .venv/bin/python bench/onnx_decode.py [--write]

One run (about 3 minutes on 2 cores), on the default model (SmolLM2-135M-Instruct int4,
CPU), measures side by side:

1. single-stream greedy decode tokens/s: a ``dragoman serve`` process started here,
   streamed over real HTTP (OpenAI SSE, httpx), against raw ``Generator`` loops in this
   process on the same prompt tokens (the same chat template rendered by the same
   function): one with the library's default session options, one with the session
   options dragoman's worker sets (intra-op spinning off), which isolates the gateway's
   own cost. Then time to first token, in a separate series of short requests;
2. aggregate tokens/s at 1, 2, 4 and 8 concurrent streams (the backend admits
   ``max_concurrent`` = 4 at once, the rest wait in its queue);
3. ``GET /api/version`` latency p50/p99 idle and while 4 generations stream, from a
   separate prober process (so this process's own work does not count);
4. the per-token cost of each logits-processor-backed option (Ollama ``/api/chat``,
   temperature 0.8): the worker's ``eval_duration / eval_count`` against plain sampling;
5. peak RSS of the server process and of its worker process (psutil, every 50 ms).

The server is warmed up first, so model load is never inside a measured request.
Variants alternate within every round (the machine is shared and noisy); figures are
medians with [min–max] over the rounds, ratios are medians of per-round ratios.
``--write`` puts the results into ``docs/benchmarks.md`` (section "ONNX backend (issue
#3)"), ``docs/onnx_decode.png`` and ``bench/results/onnx_decode.json``. Needs the
``bench`` extra (matplotlib, psutil).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgspec
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import onnx_decode_report as report  # noqa: E402  (next to this script)
import onnx_processors  # noqa: E402
from onnx_decode_report import RAW, RAW_NO_SPIN, SERVED  # noqa: E402

MODEL = "smollm2:135m"
PROMPT = "Write a long story about a dragon who learns to paint. Describe every painting in detail."
MiB = 1024 * 1024



@dataclass
class Stream:
    """One generation as its client saw it; times are ``time.monotonic()`` seconds."""

    sent: float
    first: float | None = None
    end: float | None = None
    tokens: int = 0
    text: str = ""
    eval_ns: int = 0  # worker-side (Ollama's eval_duration), where the dialect reports it
    arrivals: list[float] = field(default_factory=list)  # every content delta's arrival

    @property
    def ttft_ms(self) -> float:
        assert self.first is not None
        return (self.first - self.sent) * 1e3

    @property
    def decode_tps(self) -> float:
        """Tokens after the first over the time after the first: prefill left out."""
        assert self.first is not None and self.end is not None
        return (self.tokens - 1) / (self.end - self.first)


# -- the raw baseline ------------------------------------------------------------------------


class RawLoop:
    """The same model driven by a bare Generator loop; ``spinning=False`` loads it with the
    session options dragoman's worker sets (``dragoman/backends/onnx/providers.py``)."""

    def __init__(self, model_dir: Path, *, spinning: bool) -> None:
        import onnxruntime_genai as og

        from dragoman.backends.text.chat_template import load_chat_template, special_tokens

        config = og.Config(str(model_dir))
        config.clear_providers()
        if not spinning:
            options = {"session.intra_op.allow_spinning": "0"}
            config.overlay(json.dumps({"model": {"decoder": {"session_options": options}}}))
        self.og = og
        self.model = og.Model(config)
        self.tokenizer = og.Tokenizer(self.model)
        self.eos = frozenset(int(i) for i in self.tokenizer.eos_token_ids)
        self.template = load_chat_template(model_dir)
        self.special = special_tokens(model_dir)

    def prompt_ids(self, prompt: str | list[dict[str, str]]) -> list[int]:
        """The prompt (one user message, or OpenAI-style messages) as dragoman renders it
        (the model's chat template), tokenized."""
        return self.tokenizer.encode(self.render(prompt))

    def render(self, prompt: str | list[dict[str, str]]) -> str:
        from dragoman.adapters.canonical import Message, TextPart
        from dragoman.backends.text.chat_template import render_chat

        chat = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        messages = [Message(role=m["role"], parts=[TextPart(m["content"])]) for m in chat]  # type: ignore[arg-type]
        return render_chat(self.template, messages, tokens=self.special)

    def run(self, prompt: str | list[dict[str, str]], new_tokens: int) -> Stream:
        og = self.og
        stream = Stream(sent=time.monotonic())
        ids = self.prompt_ids(prompt)
        params = og.GeneratorParams(self.model)
        params.set_search_options(max_length=len(ids) + new_tokens, do_sample=False)
        generator = og.Generator(self.model, params)
        generator.append_tokens(ids)
        decoder = self.tokenizer.create_stream()
        pieces = []
        while not generator.is_done():
            generator.generate_next_token()
            token = int(generator.get_next_tokens()[0])
            stream.tokens += 1
            if token in self.eos:
                break
            piece = decoder.decode(token)
            if piece and stream.first is None:
                stream.first = time.monotonic()
            pieces.append(piece)
        stream.end = time.monotonic()
        stream.text = "".join(pieces)
        return stream


# -- the server and its clients --------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(port: int, config: Path | None, root: Path = ROOT) -> subprocess.Popen[bytes]:
    """``dragoman serve`` from the checkout at ``root`` (another one serves a before/after)."""
    command = [sys.executable, "-m", "dragoman.proxy.cli", "serve", "--port", str(port)]
    if config is not None:
        command += ["--config", str(config)]
    log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"onnx-bench-server-{port}.log"
    env = {**os.environ, "PYTHONPATH": str(root)}
    with open(log_path, "wb") as log:
        server = subprocess.Popen(command, cwd=root, stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"dragoman serve exited with {server.returncode}; see {log_path}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/version", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit(f"dragoman serve did not answer within 60 s; see {log_path}")


async def openai_stream(
    client: httpx.AsyncClient, prompt: str | list[dict[str, str]], new_tokens: int, stream: Stream | None = None
) -> Stream:
    """``stream``: fill this one (a caller that cancels the task still reads what arrived)."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    body = {
        "model": MODEL, "stream": True, "stream_options": {"include_usage": True},
        "temperature": 0, "max_tokens": new_tokens, "messages": messages,
    }  # fmt: skip
    stream = stream or Stream(sent=time.monotonic())
    pieces = []
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = msgspec.json.decode(line[6:])
            if chunk.get("usage"):
                stream.tokens = chunk["usage"]["completion_tokens"]
            for choice in chunk["choices"]:
                if content := choice["delta"].get("content"):
                    arrived = time.monotonic()
                    if stream.first is None:
                        stream.first = arrived
                    stream.arrivals.append(arrived)
                    pieces.append(content)
                if choice.get("finish_reason"):
                    stream.end = time.monotonic()
    stream.text = "".join(pieces)
    return stream


async def ollama_stream(client: httpx.AsyncClient, prompt: str, options: dict[str, Any]) -> Stream:
    body = {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "options": options}
    stream = Stream(sent=time.monotonic())
    async with client.stream("POST", "/api/chat", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line:
                continue
            chunk = msgspec.json.decode(line)
            if chunk["message"].get("content") and stream.first is None:
                stream.first = time.monotonic()
            if chunk.get("done"):
                stream.end = time.monotonic()
                stream.tokens = chunk["eval_count"]
                stream.eval_ns = chunk["eval_duration"]
    return stream


class RssWatch:
    """Peak RSS of the server process and of its children (the model worker)."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.server = psutil.Process(pid)
        self.interval = interval
        self.peak_server = 0
        self.peak_worker = 0
        self.timeline: list[tuple[float, float, float]] = []  # (s, server MiB, worker MiB) every 0.5 s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.began = time.monotonic()

    def __enter__(self) -> RssWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        children: list[psutil.Process] = []
        listed = 0.0
        while not self._stop.wait(self.interval):
            try:
                # Listing children scans all of /proc: once a second, not every sample.
                if time.monotonic() - listed > 1.0:
                    children, listed = self.server.children(recursive=True), time.monotonic()
                server = self.server.memory_info().rss
                worker = sum(c.memory_info().rss for c in children)
            except psutil.Error:
                listed = 0.0
                continue
            self.peak_server = max(self.peak_server, server)
            self.peak_worker = max(self.peak_worker, worker)
            elapsed = time.monotonic() - self.began
            if not self.timeline or elapsed - self.timeline[-1][0] >= 0.5:  # peaks from every sample, a plot from a few
                self.timeline.append((round(elapsed, 2), round(server / MiB, 1), round(worker / MiB, 1)))


# -- the event-loop prober (its own process) ---------------------------------------------------


def probe(url: str, interval: float) -> None:
    """GET ``url`` every ``interval`` s on one keep-alive connection until stdin closes;
    print ``[[monotonic sent, latency ms], …]``."""
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    parts = httpx.URL(url)
    connection = http.client.HTTPConnection(parts.host, parts.port, timeout=10)
    samples = []
    while not stop.wait(interval):
        sent = time.monotonic()
        connection.request("GET", parts.raw_path.decode())
        connection.getresponse().read()
        samples.append([sent, (time.monotonic() - sent) * 1e3])
    print(json.dumps(samples[1:]))  # the first one also opened the connection


def start_prober(port: int) -> subprocess.Popen[str]:
    command = [sys.executable, __file__, "--probe", f"http://127.0.0.1:{port}/api/version"]
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def finish_prober(prober: subprocess.Popen[str]) -> list[tuple[float, float]]:
    out, _ = prober.communicate("", timeout=30)
    return [(sent, ms) for sent, ms in json.loads(out)]


# -- the measurements --------------------------------------------------------------------------


def rotated(items: list[str], rep: int) -> list[str]:
    """Each variant first, middle and last in turn: drifting background load hits all."""
    shift = rep % len(items)
    return items[shift:] + items[:shift]


async def single_stream(client: httpx.AsyncClient, raws: dict[str, RawLoop], args: argparse.Namespace,
                        out: dict[str, Any]) -> None:  # fmt: skip
    decode: dict[str, list[float]] = {name: [] for name in (*raws, SERVED)}
    same_text = True
    for rep in range(args.reps):
        texts = {}
        for name in rotated(list(decode), rep):
            run = raws[name].run(PROMPT, args.new_tokens) if name in raws else None
            stream = run or await openai_stream(client, PROMPT, args.new_tokens)
            decode[name].append(stream.decode_tps)
            texts[name] = stream.text
            out["new_tokens"] = stream.tokens
        same_text &= len(set(texts.values())) == 1
        print(f"  round {rep + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in decode.items()) + " tok/s", flush=True)
    out["decode"], out["same_text"] = decode, same_text
    ttft: dict[str, list[float]] = {name: [] for name in decode}
    for rep in range(args.ttft_reps):
        for name in rotated(list(ttft), rep):
            run = raws[name].run(PROMPT, 2) if name in raws else None
            ttft[name].append((run or await openai_stream(client, PROMPT, 2)).ttft_ms)
    out["ttft"] = ttft
    print("  TTFT medians: " + ", ".join(f"{k} {sorted(v)[len(v) // 2]:.1f} ms" for k, v in ttft.items()), flush=True)


async def concurrency(client: httpx.AsyncClient, args: argparse.Namespace, out: dict[str, Any]) -> None:
    aggregate: dict[str, list[float]] = {}
    ttft: dict[str, list[float]] = {}
    for rep in range(args.rounds):
        for streams in (1, 2, 4, 8):
            began = time.monotonic()
            done = await asyncio.gather(*(openai_stream(client, PROMPT, args.burst_tokens) for _ in range(streams)))
            wall = max(s.end or began for s in done) - began
            aggregate.setdefault(str(streams), []).append(sum(s.tokens for s in done) / wall)
            ttft.setdefault(str(streams), []).extend(s.ttft_ms for s in done)
        print(f"  round {rep + 1}: " + ", ".join(f"{n}→{v[-1]:.0f}" for n, v in aggregate.items()) + " tok/s",
              flush=True)  # fmt: skip
    out["aggregate"], out["aggregate_ttft"] = aggregate, ttft


async def responsiveness(client: httpx.AsyncClient, port: int, args: argparse.Namespace, out: dict[str, Any]) -> None:
    prober = start_prober(port)
    await asyncio.sleep(args.idle_seconds)
    idle = [ms for _, ms in finish_prober(prober)]
    # The control: the server idle, every core kept busy by plain busy loops instead.
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    prober = start_prober(port)
    await asyncio.sleep(args.idle_seconds)
    for hog in hogs:
        hog.kill()
        hog.wait()
    busy = [ms for _, ms in finish_prober(prober)]
    prober = start_prober(port)
    streams = await asyncio.gather(*(openai_stream(client, PROMPT, args.load_tokens) for _ in range(4)))
    samples = finish_prober(prober)
    # Only while all four stream: after the last first token, before the first end.
    low, high = max(s.first or 0 for s in streams), min(s.end or 0 for s in streams)
    loaded = [ms for sent, ms in samples if low <= sent <= high]
    out["version_latency_ms"] = {"idle": idle, "cpu_hogs": busy, "loaded": loaded}
    print(f"  {len(idle)} idle probes, {len(busy)} with busy loops, {len(loaded)} under load", flush=True)


async def processors(client: httpx.AsyncClient, raw: RawLoop, args: argparse.Namespace, out: dict[str, Any]) -> None:
    out["processors"] = await onnx_processors.over_http(
        lambda options: ollama_stream(client, PROMPT, options), args.processor_rounds, args.burst_tokens
    )
    print("  in this process, on real logits", flush=True)
    out["processors_in_process"] = onnx_processors.in_process_costs(raw.og, raw.model, raw.prompt_ids(PROMPT))


async def measure(args: argparse.Namespace, port: int, raws: dict[str, RawLoop], out: dict[str, Any]) -> None:
    limits = httpx.Limits(max_connections=16, max_keepalive_connections=16)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=300, limits=limits) as client:
        print("warming up (model load in the server, first runs of every variant)", flush=True)
        for _ in range(2):
            await openai_stream(client, PROMPT, 16)
            for raw in raws.values():
                raw.run(PROMPT, 16)
        print(f"single stream: {args.new_tokens} new tokens × {args.reps} rounds, TTFT × {args.ttft_reps}", flush=True)
        await single_stream(client, raws, args, out)
        print("concurrent streams 1/2/4/8", flush=True)
        await concurrency(client, args, out)
        print("event-loop latency, idle and under 4 streams", flush=True)
        await responsiveness(client, port, args, out)
        print("logits processors", flush=True)
        await processors(client, raws[RAW_NO_SPIN], args, out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=8, help="single-stream decode rounds")
    parser.add_argument("--ttft-reps", type=int, default=20, help="time-to-first-token rounds")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the concurrency runs")
    parser.add_argument("--processor-rounds", type=int, default=5, help="rounds of the logits-processor runs")
    parser.add_argument("--new-tokens", type=int, default=128, help="single-stream new tokens")
    parser.add_argument("--burst-tokens", type=int, default=64, help="new tokens per stream in the other runs")
    parser.add_argument("--load-tokens", type=int, default=256, help="tokens per stream while probing")
    parser.add_argument("--idle-seconds", type=float, default=3.0)
    parser.add_argument("--config", type=Path, help="dragoman config (default: the built-in one)")
    parser.add_argument("--model-dir", type=Path, help="model folder (default: the built-in config's)")
    parser.add_argument("--write", action="store_true", help="write docs/benchmarks.md, the plot and the JSON")
    parser.add_argument("--render", action="store_true", help="only re-render bench/results/onnx_decode.json")
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        probe(args.probe, 0.01)
        return 0
    if args.render:
        out = json.loads((ROOT / "bench" / "results" / "onnx_decode.json").read_text(encoding="utf-8"))
        section = report.render(out)
        print(section)
        if args.write:
            report.write(out, section, ROOT)
        return 0
    import onnxruntime_genai as og

    from dragoman.backends.onnx.prepare import default_model_path

    began = time.monotonic()
    out: dict[str, Any] = {
        "command": "python " + " ".join([os.path.relpath(__file__, ROOT), *sys.argv[1:]]),
        "machine": f"{platform.machine()}, {psutil.cpu_count()} CPUs",
        "load_at_start": "/".join(f"{x:.1f}" for x in os.getloadavg()),
        "onnxruntime_genai": og.__version__,
        "python": platform.python_version(),
        "burst_tokens": args.burst_tokens,
        "load_tokens": args.load_tokens,
    }
    model_dir = args.model_dir or default_model_path("cpu")
    raws = {RAW: RawLoop(model_dir, spinning=True), RAW_NO_SPIN: RawLoop(model_dir, spinning=False)}
    port = free_port()
    server = start_server(port, args.config)
    try:
        with RssWatch(server.pid) as rss:
            asyncio.run(measure(args, port, raws, out))
    finally:
        server.terminate()
        server.wait(30)
    out["rss_mib"] = {"server": rss.peak_server / MiB, "worker": rss.peak_worker / MiB, "timeline": rss.timeline}
    out["seconds"] = time.monotonic() - began
    section = report.render(out)
    print("\n" + section)
    if args.write:
        report.write(out, section, ROOT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
