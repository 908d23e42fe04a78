"""ONNX backend benchmark (issue #3): dragoman over HTTP against a raw onnxruntime-genai loop.

    .venv/bin/python bench/onnx_decode.py [--reps 5] [--new-tokens 128] [--write]

One run, on the default model (SmolLM2-135M-Instruct int4, CPU), measures side by side:

1. single-stream greedy decode tokens/s and time to first token: a ``dragoman serve``
   process started here, streamed over real HTTP (OpenAI SSE, httpx), against a raw
   ``Generator`` loop in this process on the same prompt tokens (the same chat template,
   rendered by the same function). The two alternate, the server warmed up first, so
   model load is never inside a measured request;
2. aggregate tokens/s at 1, 2, 4 and 8 concurrent streams (the backend admits
   ``max_concurrent`` = 4 at once, the rest wait in its queue);
3. ``GET /api/version`` latency p50/p99 idle and while 4 generations stream, from a
   separate prober process (so this process's own work does not count);
4. the per-token cost of each logits-processor-backed option (Ollama ``/api/chat``,
   sampling at temperature 0.8): the worker's ``eval_duration / eval_count`` against
   plain sampling, in µs/token; the neutral values of every option must cost nothing;
5. peak RSS of the server process and of its worker process (psutil, sampled every 50 ms).

Variants are interleaved round by round (the machine is shared and noisy); figures are
medians with their [min–max] over the rounds. ``--write`` puts the table into
``docs/benchmarks.md`` (section "ONNX backend (issue #3)") and the plot into
``docs/onnx_decode.png``. Needs the ``bench`` extra (matplotlib, psutil).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import platform
import socket
import statistics
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
sys.path.insert(0, str(ROOT))

MODEL = "smollm2:135m"
PROMPT = "Write a long story about a dragon who learns to paint. Describe every painting in detail."
SECTION = "## ONNX backend (issue #3)"
MiB = 1024 * 1024

# (label, Ollama options on top of the sampling base). The neutral row must match plain sampling.
SAMPLING_BASE: dict[str, Any] = {"temperature": 0.8, "seed": 7}
PROCESSOR_VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("plain sampling", {}),
    ("all neutral", {"min_p": 0.0, "tfs_z": 1.0, "mirostat": 0, "repeat_penalty": 1.0,
                     "presence_penalty": 0.0, "frequency_penalty": 0.0}),
    ("min_p 0.05", {"min_p": 0.05}),
    ("presence 0.5", {"presence_penalty": 0.5}),
    ("frequency 0.5", {"frequency_penalty": 0.5}),
    ("repeat 1.1, last_n 64", {"repeat_penalty": 1.1, "repeat_last_n": 64}),
    ("repeat 1.1 (library)", {"repeat_penalty": 1.1}),
    ("tfs_z 0.95", {"tfs_z": 0.95}),
    ("mirostat 1", {"mirostat": 1}),
    ("mirostat 2", {"mirostat": 2}),
]  # fmt: skip


# -- statistics ------------------------------------------------------------------------------


def spread(values: list[float], fmt: str = "{:.1f}") -> str:
    """``median [min–max]``."""
    if not values:
        return "–"
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}–{fmt.format(max(values))}]"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


@dataclass
class Stream:
    """One generation as seen by its client; times are ``time.monotonic()`` seconds."""

    sent: float
    first: float | None = None
    end: float | None = None
    tokens: int = 0
    text: str = ""
    eval_ns: int = 0  # worker-side (Ollama's eval_duration), when the dialect reports it

    @property
    def ttft_ms(self) -> float:
        assert self.first is not None
        return (self.first - self.sent) * 1e3

    @property
    def decode_tps(self) -> float:
        """Tokens after the first over the time after the first: prefill excluded."""
        assert self.first is not None and self.end is not None
        return (self.tokens - 1) / (self.end - self.first)


# -- the raw baseline ------------------------------------------------------------------------


class RawLoop:
    """The same model, loaded the way the worker loads it, driven by a bare Generator loop."""

    def __init__(self, model_dir: Path) -> None:
        import onnxruntime_genai as og

        from backends.onnx.providers import load_model
        from backends.text.chat_template import load_chat_template, special_tokens

        self.og = og
        self.model, _ = load_model(model_dir, ["cpu"])
        self.tokenizer = og.Tokenizer(self.model)
        self.eos = frozenset(int(i) for i in self.tokenizer.eos_token_ids)
        self.template = load_chat_template(model_dir)
        self.tokens = special_tokens(model_dir)

    def run(self, prompt: str, new_tokens: int) -> Stream:
        from adapters.canonical import Message, TextPart
        from backends.text.chat_template import render_chat

        og = self.og
        stream = Stream(sent=time.monotonic())
        text = render_chat(self.template, [Message(role="user", parts=[TextPart(prompt)])], tokens=self.tokens)
        ids = self.tokenizer.encode(text)
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


def start_server(port: int, config: Path | None) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "proxy.cli", "serve", "--port", str(port)]
    if config is not None:
        command += ["--config", str(config)]
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"onnx-bench-server-{port}.log", "wb")  # noqa: SIM115
    server = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"dragoman serve exited with {server.returncode}; see {log.name}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/version", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("dragoman serve did not answer within 60 s")


async def openai_stream(client: httpx.AsyncClient, prompt: str, new_tokens: int) -> Stream:
    body = {
        "model": MODEL, "stream": True, "stream_options": {"include_usage": True},
        "temperature": 0, "max_tokens": new_tokens, "messages": [{"role": "user", "content": prompt}],
    }  # fmt: skip
    stream = Stream(sent=time.monotonic())
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
                    if stream.first is None:
                        stream.first = time.monotonic()
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
        self.timeline: list[tuple[float, float, float]] = []  # (t, server MiB, worker MiB)
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
            self.timeline.append((time.monotonic() - self.began, server / MiB, worker / MiB))


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
        response = connection.getresponse()
        response.read()
        samples.append([sent, (time.monotonic() - sent) * 1e3])
    print(json.dumps(samples[1:]))  # the first one also opened the connection


def start_prober(port: int) -> subprocess.Popen[str]:
    url = f"http://127.0.0.1:{port}/api/version"
    command = [sys.executable, __file__, "--probe", url]
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def finish_prober(prober: subprocess.Popen[str]) -> list[tuple[float, float]]:
    out, _ = prober.communicate("", timeout=30)
    return [(s, ms) for s, ms in json.loads(out)]


# -- the measurements --------------------------------------------------------------------------


@dataclass
class Results:
    raw: list[Stream] = field(default_factory=list)
    served: list[Stream] = field(default_factory=list)
    same_text: bool = True
    aggregate: dict[int, list[float]] = field(default_factory=dict)
    aggregate_ttft: dict[int, list[float]] = field(default_factory=dict)
    idle_ms: list[float] = field(default_factory=list)
    loaded_ms: list[float] = field(default_factory=list)
    processors: dict[str, list[float]] = field(default_factory=dict)  # µs/token, worker-side
    processors_wall: dict[str, list[float]] = field(default_factory=dict)  # tok/s, client-side
    processor_active: dict[str, bool] = field(default_factory=dict)


async def single_stream(client: httpx.AsyncClient, raw: RawLoop, args: argparse.Namespace, out: Results) -> None:
    for rep in range(args.reps):
        order = ("raw", "served") if rep % 2 == 0 else ("served", "raw")
        for variant in order:
            if variant == "raw":
                out.raw.append(raw.run(PROMPT, args.new_tokens))
            else:
                out.served.append(await openai_stream(client, PROMPT, args.new_tokens))
        out.same_text &= out.raw[-1].text == out.served[-1].text
        print(f"  round {rep + 1}: raw {out.raw[-1].decode_tps:.1f} tok/s, dragoman {out.served[-1].decode_tps:.1f}"
              f" tok/s; TTFT raw {out.raw[-1].ttft_ms:.1f} ms, dragoman {out.served[-1].ttft_ms:.1f} ms", flush=True)


async def concurrency(client: httpx.AsyncClient, args: argparse.Namespace, out: Results) -> None:
    for rep in range(args.rounds):
        for streams in (1, 2, 4, 8):
            began = time.monotonic()
            done = await asyncio.gather(*(openai_stream(client, PROMPT, args.burst_tokens) for _ in range(streams)))
            wall = max(s.end or 0 for s in done) - began
            out.aggregate.setdefault(streams, []).append(sum(s.tokens for s in done) / wall)
            out.aggregate_ttft.setdefault(streams, []).extend(s.ttft_ms for s in done)
        print(f"  round {rep + 1}: " + ", ".join(f"{n}→{v[-1]:.0f}" for n, v in out.aggregate.items()) + " tok/s",
              flush=True)


async def responsiveness(client: httpx.AsyncClient, port: int, args: argparse.Namespace, out: Results) -> None:
    prober = start_prober(port)
    await asyncio.sleep(args.idle_seconds)
    out.idle_ms = [ms for _, ms in finish_prober(prober)]
    prober = start_prober(port)
    streams = await asyncio.gather(*(openai_stream(client, PROMPT, args.load_tokens) for _ in range(4)))
    samples = finish_prober(prober)
    # Only while all four stream: after the last first token, before the first end.
    lo, hi = max(s.first or 0 for s in streams), min(s.end or 0 for s in streams)
    out.loaded_ms = [ms for sent, ms in samples if lo <= sent <= hi]


async def processors(client: httpx.AsyncClient, args: argparse.Namespace, out: Results) -> None:
    from adapters.canonical import SamplingOptions
    from backends.onnx.sampling import plan_sampling, processing_active

    for rep in range(args.rounds):
        for label, extra in PROCESSOR_VARIANTS:
            options = {**SAMPLING_BASE, **extra, "num_predict": args.burst_tokens}
            out.processor_active[label] = processing_active(plan_sampling(SamplingOptions(**options))[1])
            stream = await ollama_stream(client, PROMPT, options)
            out.processors.setdefault(label, []).append(stream.eval_ns / 1e3 / max(stream.tokens, 1))
            out.processors_wall.setdefault(label, []).append(stream.decode_tps)
        print(f"  round {rep + 1} done", flush=True)


# -- report ------------------------------------------------------------------------------------


def report(out: Results, rss: RssWatch, args: argparse.Namespace, seconds: float) -> str:
    med = statistics.median
    raw_tps, srv_tps = [s.decode_tps for s in out.raw], [s.decode_tps for s in out.served]
    raw_ttft, srv_ttft = [s.ttft_ms for s in out.raw], [s.ttft_ms for s in out.served]
    ttft_diff = [b - a for a, b in zip(raw_ttft, srv_ttft, strict=True)]
    ratio = med(srv_tps) / med(raw_tps)
    lines = [
        SECTION,
        "",
        f"`{args.command}` — {platform.machine()}, {psutil.cpu_count()} CPUs, load average at start "
        f"{args.load_at_start}, onnxruntime-genai {args.og_version}, Python {platform.python_version()}; "
        f"{seconds:.0f} s in all. Model: SmolLM2-135M-Instruct int4 (CPU build), greedy, fixed prompt "
        f"({out.served[0].tokens} new tokens single-stream). Figures: median [min–max] over the rounds; "
        "variants interleaved round by round.",
        "",
        "### Single stream: dragoman over HTTP vs a raw Generator loop",
        "",
        "| | decode tok/s | time to first token (ms) |",
        "|---|---|---|",
        f"| raw onnxruntime-genai loop | {spread(raw_tps)} | {spread(raw_ttft)} |",
        f"| dragoman (OpenAI SSE over HTTP) | {spread(srv_tps)} | {spread(srv_ttft)} |",
        f"| dragoman / raw | **{ratio:.3f}×** (target ≥ 0.9) | +{spread(ttft_diff)} paired (target < 10) |",
        "",
        f"Same greedy text from both in every round: {'yes' if out.same_text else 'NO'}. "
        "Decode tok/s counts the tokens after the first over the time after the first (prefill excluded); "
        "TTFT is from sending the request (raw: from rendering the template) to the first text.",
        "",
        "### Concurrent streams (aggregate)",
        "",
        f"{args.burst_tokens} new tokens per stream, all sent at once; the backend runs `max_concurrent` = 4 "
        "at a time, interleaved a token each, the rest wait in its queue (`max_queue` = 16).",
        "",
        "| streams | aggregate tok/s | × raw single-stream | TTFT per stream (ms) |",
        "|---|---|---|---|",
    ]
    for n, values in out.aggregate.items():
        lines.append(f"| {n} | {spread(values)} | {med(values) / med(raw_tps):.2f}× | "
                     f"{spread(out.aggregate_ttft[n], '{:.0f}')} |")  # fmt: skip
    lines += [
        "",
        "### Event loop: `GET /api/version` latency",
        "",
        "| | requests | p50 (ms) | p99 (ms) | max (ms) |",
        "|---|---|---|---|---|",
    ]
    for label, values in (("idle", out.idle_ms), ("while 4 generations stream", out.loaded_ms)):
        if values:
            lines.append(f"| {label} | {len(values)} | {percentile(values, 50):.2f} | {percentile(values, 99):.2f} "
                         f"| {max(values):.2f} |")  # fmt: skip
    base = med(out.processors["plain sampling"])
    lines += [
        "",
        "### Logits processors: cost per token",
        "",
        f"Ollama `/api/chat`, temperature 0.8, seed 7, {args.burst_tokens} tokens; µs/token is the worker's "
        "`eval_duration / eval_count` (token step, processor and detokenizer), so HTTP noise is left out.",
        "",
        "| options | numpy processor | µs/token | added µs/token | client tok/s |",
        "|---|---|---|---|---|",
    ]
    for label, values in out.processors.items():
        added = med(values) - base
        lines.append(f"| {label} | {'yes' if out.processor_active[label] else 'no'} | {spread(values, '{:.0f}')} | "
                     f"{added:+.0f} | {spread(out.processors_wall[label])} |")  # fmt: skip
    lines += [
        "",
        "### Memory",
        "",
        f"Peak RSS during the run: server process {rss.peak_server / MiB:.0f} MiB, model worker process "
        f"{rss.peak_worker / MiB:.0f} MiB.",
        "",
        "![ONNX backend benchmark](onnx_decode.png)",
        "",
    ]
    return "\n".join(lines)


def plot(out: Results, rss: RssWatch, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 3, figsize=(15, 8.5))
    pairs = (("raw loop", out.raw), ("dragoman", out.served))
    for i, (name, streams) in enumerate(pairs):
        ax[0, 0].scatter([i] * len(streams), [s.decode_tps for s in streams], alpha=0.6)
        ax[0, 1].scatter([i] * len(streams), [s.ttft_ms for s in streams], alpha=0.6)
    for a, title in ((ax[0, 0], "single-stream decode (tok/s)"), (ax[0, 1], "time to first token (ms)")):
        a.set_xticks([0, 1], [p[0] for p in pairs])
        a.set_xlim(-0.5, 1.5)
        a.set_title(title)
        a.grid(alpha=0.3)
    levels = list(out.aggregate)
    meds = [statistics.median(out.aggregate[n]) for n in levels]
    errs = [[m - min(out.aggregate[n]) for n, m in zip(levels, meds)], [max(out.aggregate[n]) - m for n, m in zip(levels, meds)]]
    ax[0, 2].errorbar(levels, meds, yerr=errs, marker="o", capsize=4, label="dragoman aggregate")
    ax[0, 2].axhline(statistics.median(s.decode_tps for s in out.raw), color="grey", ls="--", label="raw single stream")
    ax[0, 2].set(xticks=levels, xlabel="concurrent streams", title="aggregate decode (tok/s)")
    ax[0, 2].legend()
    ax[0, 2].grid(alpha=0.3)
    data = [v for v in (out.idle_ms, out.loaded_ms) if v]
    ax[1, 0].boxplot(data, tick_labels=["idle", "4 streams"][: len(data)], whis=(1, 99), showfliers=True)
    ax[1, 0].set(yscale="log", title="GET /api/version latency (ms, whiskers p1–p99)")
    base = statistics.median(out.processors["plain sampling"])
    labels = list(out.processors)
    added = [statistics.median(out.processors[k]) - base for k in labels]
    ax[1, 1].barh(labels, added, color=["tab:green" if not out.processor_active[k] else "tab:orange" for k in labels])
    ax[1, 1].set(title="added µs/token vs plain sampling", xlabel="µs/token")
    ax[1, 1].invert_yaxis()
    ax[1, 1].grid(alpha=0.3, axis="x")
    if rss.timeline:
        t, server, worker = zip(*rss.timeline)
        ax[1, 2].plot(t, server, label="server")
        ax[1, 2].plot(t, worker, label="worker")
        ax[1, 2].set(title="RSS (MiB)", xlabel="s")
        ax[1, 2].legend()
    fig.suptitle("dragoman ONNX backend, SmolLM2-135M int4 CPU")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def write_section(path: Path, section: str) -> None:
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    start = text.find(SECTION)
    if start >= 0:
        end = text.find("\n## ", start + len(SECTION))
        text = text[:start] + section + (text[end + 1 :] if end >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text.rstrip("\n") + "\n", encoding="utf-8")


# -- main --------------------------------------------------------------------------------------


async def measure(args: argparse.Namespace, port: int, raw: RawLoop, out: Results) -> None:
    limits = httpx.Limits(max_connections=16, max_keepalive_connections=16)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=300, limits=limits) as client:
        print("warming up (model load in the server, first runs of both)", flush=True)
        for _ in range(2):
            await openai_stream(client, PROMPT, 16)
            raw.run(PROMPT, 16)
        print(f"single stream, {args.new_tokens} new tokens, {args.reps} rounds", flush=True)
        await single_stream(client, raw, args, out)
        print("concurrent streams 1/2/4/8", flush=True)
        await concurrency(client, args, out)
        print("event-loop latency, idle and under 4 streams", flush=True)
        await responsiveness(client, port, args, out)
        print("logits processors", flush=True)
        await processors(client, args, out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="single-stream rounds")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the concurrency and processor runs")
    parser.add_argument("--new-tokens", type=int, default=128, help="single-stream new tokens")
    parser.add_argument("--burst-tokens", type=int, default=64, help="new tokens per stream in the other runs")
    parser.add_argument("--load-tokens", type=int, default=256, help="tokens per stream while probing")
    parser.add_argument("--idle-seconds", type=float, default=3.0)
    parser.add_argument("--config", type=Path, help="dragoman config (default: the built-in one)")
    parser.add_argument("--model-dir", type=Path, help="model folder (default: the built-in config's)")
    parser.add_argument("--write", action="store_true", help="write docs/benchmarks.md and docs/onnx_decode.png")
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        probe(args.probe, 0.01)
        return 0
    import onnxruntime_genai as og

    from backends.onnx.prepare import default_model_path

    args.command = "python " + " ".join([os.path.relpath(__file__, ROOT), *sys.argv[1:]])
    args.load_at_start = "/".join(f"{x:.1f}" for x in os.getloadavg())
    args.og_version = og.__version__
    model_dir = args.model_dir or default_model_path("cpu")
    began = time.monotonic()
    raw = RawLoop(model_dir)
    port = free_port()
    server = start_server(port, args.config)
    out = Results()
    try:
        with RssWatch(server.pid) as rss:
            asyncio.run(measure(args, port, raw, out))
    finally:
        server.terminate()
        server.wait(30)
    section = report(out, rss, args, time.monotonic() - began)
    print("\n" + section)
    if args.write:
        docs = ROOT / "docs"
        plot(out, rss, docs / "onnx_decode.png")
        write_section(docs / "benchmarks.md", section)
        print(f"wrote {docs / 'benchmarks.md'} and {docs / 'onnx_decode.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
