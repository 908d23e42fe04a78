"""Speed where users feel it (issue #14): dragoman over HTTP against a raw
onnxruntime-genai loop, llama.cpp (node-llama-cpp) on the same GGUF, and optionally an
earlier checkout of dragoman, side by side in one run.

    DRAGOMAN_HOME=.dragoman-test-home .venv/bin/python bench/onnx_speed.py \\
        [--before DIR] [--write]

Rows (each variant alternates within every round; ratios are medians of per-round ones):

1. decode tok/s, 128 new tokens, greedy; first token of a 53-token prompt (server:
   request sent → first content delta, one persistent HTTP client; raw loop: template +
   tokenize → first token; llama.cpp: tokenize → first token);
2. the next turn of a 6-turn chat of ~1,500 tokens (the server has just answered turn 5)
   against the same prompt cold (a different first line, so nothing is cached) and
   against llama.cpp over its cached history;
3. a ~1,500-token system prompt shared by different requests, against cold;
4. aggregate tok/s at 1, 4 and 8 concurrent streams;
5. inter-token gaps of 3 running streams while a ~1,500-token prompt is prefilled,
   against the same streams' gaps just before it arrived;
6. RSS of the server's model worker: after the warm-up and at its peak.

Both engines: beside ``dragoman`` (the engine the config gives, the batch engine where
the CPU allows it), ``dragoman, generator engine`` serves the same config with
``engine: generator`` in rows 1 and 2 (``--no-generator`` leaves it out). Every run
prints the CPU's model and the instruction sets the int4 kernels choose by (avx2,
avx512*, avx_vnni, amx; ARM64 features), and which engine each server runs (from
``/api/ps``), and writes both into its results.

``--before DIR`` serves a second dragoman from another checkout (for instance ``git
archive main | tar -x -C DIR``) with the same venv, so before and after share the run.
llama.cpp runs with 1 and with 2 threads (its spinning thread pool collapses when the two
cores are shared with anything else; the better of the two is the peer). Needs node and
``npm i -E --prefix .bench-node node-llama-cpp@3.21.1`` (git-ignored), else it is left out.
``--write`` puts the results into ``docs/benchmarks.md`` (section "Speed where users feel
it (issue #14)"), ``docs/onnx_speed.png`` and ``bench/results/onnx_speed.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import msgspec
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import cpu_info  # noqa: E402
import onnx_speed_report as report  # noqa: E402
import speed_engines  # noqa: E402
import speed_prompts as prompts  # noqa: E402
from onnx_decode import PROMPT, RawLoop, RssWatch, Stream, free_port, openai_stream, rotated, start_server  # noqa: E402

MiB = 1024 * 1024
GGUF = "downloads/SmolLM2-135M-Instruct.Q4_1.gguf"
RAW = "raw loop"
GENERATOR = report.GENERATOR
LONG_OUTPUT = "Count from one to five hundred in words, one number per line, without skipping any."


# -- llama.cpp ---------------------------------------------------------------------------------


class LlamaCpp:
    """``bench/llamacpp_peer.mjs``: one model, one context sequence, a JSON line each way."""

    def __init__(self, gguf: Path, threads: int, context: int) -> None:
        env = {**os.environ, "LLAMA_THREADS": str(threads)}
        command = ["node", str(ROOT / "bench" / "llamacpp_peer.mjs"), str(gguf), str(context)]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        ready = self.process.stdout.readline()  # type: ignore[union-attr]
        if not ready.startswith('{"ready"'):
            raise RuntimeError(f"llama.cpp peer did not start: {ready!r}")

    def run(self, prompt: str, max_tokens: int, *, reuse: bool) -> dict[str, Any]:
        line = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "reuse": reuse})
        self.process.stdin.write(line + "\n")  # type: ignore[union-attr]
        self.process.stdin.flush()  # type: ignore[union-attr]
        answer = json.loads(self.process.stdout.readline())  # type: ignore[union-attr]
        if "error" in answer:
            raise RuntimeError(f"llama.cpp peer: {answer['error']}")
        return answer

    def close(self) -> None:
        self.process.stdin.close()  # type: ignore[union-attr]
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_peers(home: Path, context: int, threads: list[int]) -> dict[str, LlamaCpp]:
    gguf = home / GGUF
    if shutil.which("node") is None or not (ROOT / ".bench-node" / "node_modules" / "node-llama-cpp").is_dir():
        print("llama.cpp left out: needs node and `npm i -E --prefix .bench-node node-llama-cpp@3.21.1`")
        return {}
    if not gguf.is_file():
        print(f"llama.cpp left out: {gguf} is missing")
        return {}
    return {f"llama.cpp, {n} thread{'s' * (n > 1)}": LlamaCpp(gguf, n, context) for n in threads}


# -- one variant, one measurement ----------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace, clients: dict[str, httpx.AsyncClient], raw: RawLoop,
                 peers: dict[str, LlamaCpp]) -> None:  # fmt: skip
        self.args = args
        self.clients = clients  # server variant → its persistent client
        self.raw = raw
        self.peers = peers
        self.count = lambda text: len(raw.tokenizer.encode(text))

    def servers(self, *, generator: bool) -> list[str]:
        """The dragoman servers; the generator-engine one only in the rows that compare engines."""
        return [name for name in self.clients if generator or name != GENERATOR]

    def variants(self, *, raw: bool = True, peers: bool = True, generator: bool = True) -> list[str]:
        return [*self.servers(generator=generator), *([RAW] if raw else []), *(self.peers if peers else [])]

    async def generate(self, variant: str, messages: prompts.Messages, new_tokens: int, *,
                       reuse: bool = True) -> Stream:  # fmt: skip
        """One greedy generation by ``variant``; llama.cpp keeps its cache only with ``reuse``."""
        if variant in self.clients:
            return await openai_stream(self.clients[variant], messages, new_tokens)
        if variant == RAW:
            return self.raw.run(messages, new_tokens)
        answer = self.peers[variant].run(self.raw.render(messages), new_tokens, reuse=reuse)
        stream = Stream(sent=0.0, first=answer["ttft_ms"] / 1e3, end=0.0, tokens=answer["tokens"], text=answer["text"])
        if answer["tokens"] > 1:
            stream.end = stream.first + (answer["tokens"] - 1) / answer["decode_tps"]
        return stream


async def single_stream(bench: Bench, out: dict[str, Any]) -> None:
    args = bench.args
    decode: dict[str, list[float]] = {v: [] for v in bench.variants()}
    ttft: dict[str, list[float]] = {v: [] for v in bench.variants()}
    texts: dict[str, set[str]] = {v: set() for v in bench.variants()}
    message = [{"role": "user", "content": PROMPT}]
    session = [{"role": "system", "content": "Session 0. You are a helpful AI assistant."}, *message]
    out["ttft_prompt_tokens"] = len(bench.raw.prompt_ids(session))
    for rep in range(args.rounds):
        for variant in rotated(list(decode), rep):
            stream = await bench.generate(variant, message, args.new_tokens, reuse=False)
            decode[variant].append(stream.decode_tps)
            texts[variant].add(stream.text)
        for k in range(args.ttft_reps):
            # A different first line every time: nothing is reused, the overhead is the gateway's.
            numbered = [{"role": "system", "content": f"Session {rep * args.ttft_reps + k}. You are a helpful AI assistant."},
                        {"role": "user", "content": PROMPT}]  # fmt: skip
            for variant in rotated(list(ttft), rep + k):
                ttft[variant].append((await bench.generate(variant, numbered, 2, reuse=False)).ttft_ms)
        print(f"  round {rep + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in decode.items()) + " tok/s", flush=True)
    out["decode"], out["ttft"] = decode, ttft
    out["same_text"] = {v: len(t) == 1 for v, t in texts.items()}


def six_turn_chat(bench: Bench, reply_tokens: int, conversation: int) -> list[prompts.Messages]:
    """Turn k's request (k = 1..6) of one conversation: system, then k user turns with the
    raw loop's greedy replies between them (the replies any dragoman gives, at
    temperature 0). Every round has a conversation of its own, so its turn 6 is new."""
    messages = [{"role": "system", "content": prompts.chat_system()}]
    requests = []
    for turn in range(1, 7):
        text = prompts.user_turn(bench.count, turn, bench.args.turn_tokens, conversation)
        messages = [*messages, {"role": "user", "content": text}]
        requests.append(messages)
        if turn < 6:
            reply = bench.raw.run(messages, reply_tokens).text.strip()
            messages = [*messages, {"role": "assistant", "content": reply}]
    return requests


async def chat_turns(bench: Bench, out: dict[str, Any]) -> None:
    args = bench.args
    variants = bench.variants(raw=False)
    warm: dict[str, list[float]] = {v: [] for v in variants}
    paused: dict[str, list[float]] = {v: [] for v in variants}
    cold: dict[str, list[float]] = {v: [] for v in variants}
    lengths = []
    for rep in range(args.rounds):
        # Two conversations a round: turn 6 sent the moment turn 5's answer ends (a
        # script), and after a pause (a person reading the answer).
        turns = six_turn_chat(bench, args.reply_tokens, conversation=rep)
        later = six_turn_chat(bench, args.reply_tokens, conversation=1000 + rep)
        last = turns[-1]
        lengths.append(len(bench.raw.prompt_ids(last)))
        for variant in rotated(variants, rep):
            await bench.generate(variant, turns[4], args.reply_tokens)  # turn 5, as the client just sent it
            warm[variant].append((await bench.generate(variant, last, args.next_tokens)).ttft_ms)
            await bench.generate(variant, later[4], args.reply_tokens)
            await asyncio.sleep(args.pause)
            paused[variant].append((await bench.generate(variant, later[5], args.next_tokens)).ttft_ms)
            cold_prompt = prompts.with_nonce(last, secrets.token_hex(4))
            cold[variant].append((await bench.generate(variant, cold_prompt, args.next_tokens, reuse=False)).ttft_ms)
        print(f"  round {rep + 1}: " + ", ".join(f"{v} {warm[v][-1]:.0f}/{paused[v][-1]:.0f}/{cold[v][-1]:.0f}"
                                                 for v in variants)
              + f" ms (next turn at once / {args.pause:g} s later / cold)", flush=True)  # fmt: skip
    out["chat"] = {"next_turn_ms": warm, "paused_next_turn_ms": paused, "cold_ms": cold, "pause_s": args.pause}
    out["chat_prompt_tokens"] = int(statistics.median(lengths))


async def shared_system(bench: Bench, out: dict[str, Any]) -> None:
    args = bench.args
    system = prompts.tool_catalogue(bench.count, args.system_tokens)
    questions = [prompts.text_of(bench.count, 40, seed=100 + i) + " Which tool fits this?" for i in range(3 * args.rounds + 3)]
    asked = iter(questions)
    variants = bench.variants(raw=False, generator=False)
    warm: dict[str, list[float]] = {v: [] for v in variants}
    cold: dict[str, list[float]] = {v: [] for v in variants}

    def request(question: str) -> prompts.Messages:
        return [{"role": "system", "content": system}, {"role": "user", "content": question}]

    out["system_prompt_tokens"] = len(bench.raw.prompt_ids(request(questions[0])))
    print(f"  shared system prompt: {out['system_prompt_tokens']} prompt tokens", flush=True)
    for rep in range(args.rounds):
        first, second, third = next(asked), next(asked), next(asked)
        for variant in rotated(variants, rep):
            await bench.generate(variant, request(first), args.next_tokens)  # another client's request
            warm[variant].append((await bench.generate(variant, request(second), args.next_tokens)).ttft_ms)
            cold_prompt = prompts.with_nonce(request(third), secrets.token_hex(4))
            cold[variant].append((await bench.generate(variant, cold_prompt, args.next_tokens, reuse=False)).ttft_ms)
        print(f"  round {rep + 1}: " + ", ".join(f"{v} {warm[v][-1]:.0f}/{cold[v][-1]:.0f}" for v in variants)
              + " ms (shared / cold)", flush=True)  # fmt: skip
    out["shared_system"] = {"shared_ms": warm, "cold_ms": cold}


async def concurrency(bench: Bench, out: dict[str, Any]) -> None:
    args = bench.args
    aggregate: dict[str, dict[str, list[float]]] = {v: {} for v in bench.servers(generator=False)}
    for rep in range(args.rounds):
        for variant in rotated(list(aggregate), rep):
            client = bench.clients[variant]
            for streams in (1, 4, 8):
                began = time.monotonic()
                done = await asyncio.gather(*(
                    openai_stream(client, f"{PROMPT} (Story number {i + 1}.)", args.burst_tokens) for i in range(streams)
                ))  # fmt: skip
                wall = max(s.end or began for s in done) - began
                aggregate[variant].setdefault(str(streams), []).append(sum(s.tokens for s in done) / wall)
        print(f"  round {rep + 1}: " + "; ".join(
            f"{v} " + "/".join(f"{n[-1]:.0f}" for n in a.values()) for v, a in aggregate.items()
        ) + " tok/s at 1/4/8", flush=True)  # fmt: skip
    out["aggregate"] = aggregate


def gaps_in(streams: list[Stream], low: float, high: float, *, overlapping: bool) -> list[float]:
    """Inter-token gaps (ms) of ``streams``: those overlapping [low, high], or those
    lying inside it."""
    gaps = []
    for stream in streams:
        times = stream.arrivals
        for a, b in zip(times, times[1:]):
            if (b > low and a < high) if overlapping else (a >= low and b <= high):
                gaps.append((b - a) * 1e3)
    return gaps


async def prefill_gaps(bench: Bench, out: dict[str, Any]) -> None:
    """Three streams run; a long prompt arrives; their gaps while it is prefilled against
    their gaps in the same length of time just before."""
    args = bench.args
    long_text = prompts.text_of(bench.count, args.system_tokens, seed=999)
    result: dict[str, dict[str, list[float]]] = {
        v: {"quiet": [], "during": [], "prefill_ms": []} for v in bench.servers(generator=False)
    }
    for rep in range(args.rounds):
        for variant in rotated(list(result), rep):
            client = bench.clients[variant]
            streams = [Stream(sent=time.monotonic()) for _ in range(3)]
            tasks = [asyncio.create_task(openai_stream(client, f"{LONG_OUTPUT} ({i})", 1500, s))
                     for i, s in enumerate(streams)]  # fmt: skip
            while any(len(s.arrivals) < 8 for s in streams) and not any(t.done() for t in tasks):
                await asyncio.sleep(0.02)
            quiet_from = time.monotonic()
            await asyncio.sleep(args.quiet_seconds)
            long_prompt = [{"role": "user", "content": f"Session {secrets.token_hex(4)}.\n{long_text}\nSay yes."}]
            long_stream = await openai_stream(client, long_prompt, 1)
            sent, first = long_stream.sent, long_stream.first or time.monotonic()
            await asyncio.sleep(0.2)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            result[variant]["quiet"] += gaps_in(streams, quiet_from, sent, overlapping=False)
            result[variant]["during"] += gaps_in(streams, sent, first, overlapping=True)
            result[variant]["prefill_ms"].append((first - sent) * 1e3)
            await asyncio.sleep(0.5)  # the cancellations land before the next variant runs
        print(f"  round {rep + 1}: " + "; ".join(
            f"{v} p99 {report.percentile(r['quiet'], 99):.0f} quiet / {report.percentile(r['during'], 99):.0f} ms "
            f"during a {r['prefill_ms'][-1]:.0f} ms prefill" for v, r in result.items() if r["during"]
        ), flush=True)  # fmt: skip
    out["gaps"] = result
    out["gap_prompt_tokens"] = len(bench.raw.prompt_ids(f"Session 0123abcd.\n{long_text}\nSay yes."))


# -- the run ---------------------------------------------------------------------------------------


def worker_rss(server: subprocess.Popen[bytes]) -> float:
    children = psutil.Process(server.pid).children(recursive=True)
    return sum(c.memory_info().rss for c in children) / MiB


async def measure(bench: Bench, servers: dict[str, subprocess.Popen[bytes]], out: dict[str, Any]) -> None:
    print("warming up (model load in every server, first runs of every variant)", flush=True)
    for variant in bench.variants():
        for _ in range(2):
            await bench.generate(variant, [{"role": "user", "content": PROMPT}], 16, reuse=False)
    out["rss_after_warmup_mib"] = {v: worker_rss(p) for v, p in servers.items()}
    out["engines"] = {v: await speed_engines.engine_of(client) for v, client in bench.clients.items()}
    for variant, engine in out["engines"].items():
        print(f"  {variant}: {engine['engine']} engine" + (f", because {engine['reason']}" if engine["reason"] else ""), flush=True)
    sections = [("single stream: decode and first token", single_stream), ("6-turn chat", chat_turns),
                ("shared system prompt", shared_system), ("concurrent streams 1/4/8", concurrency),
                ("gaps of 3 streams while a long prompt is prefilled", prefill_gaps)]  # fmt: skip
    for title, section in sections:
        if bench.args.only and not any(word in title for word in bench.args.only):
            continue
        print(title, flush=True)
        await section(bench, out)
        out["rss_now_mib"] = {v: worker_rss(p) for v, p in servers.items()}
    await asyncio.sleep(2)  # idle: the running requests' KV is released, the prefix cache stays
    out["rss_idle_end_mib"] = {v: worker_rss(p) for v, p in servers.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="another checkout to serve side by side (before/after)")
    parser.add_argument("--before-name", default="dragoman before", help="its name in the tables")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ttft-reps", type=int, default=4, help="first-token requests per variant per round")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--burst-tokens", type=int, default=64, help="new tokens per stream, concurrent runs")
    parser.add_argument("--turn-tokens", type=int, default=150, help="tokens of each user turn of the chat")
    parser.add_argument("--reply-tokens", type=int, default=96, help="new tokens of each earlier chat reply")
    parser.add_argument("--next-tokens", type=int, default=28, help="new tokens of the measured turn")
    parser.add_argument("--system-tokens", type=int, default=1500, help="tokens of the long prompts")
    parser.add_argument("--quiet-seconds", type=float, default=2.0)
    parser.add_argument("--pause", type=float, default=2.0, help="seconds between an answer and the paused next turn")
    parser.add_argument("--only", nargs="*", help="run only the sections whose title has one of these words")
    parser.add_argument("--config", type=Path, help="dragoman config for this checkout (default: built-in)")
    parser.add_argument("--write", action="store_true", help="write docs/benchmarks.md, the plot and the JSON")
    parser.add_argument("--render", action="store_true", help="only re-render bench/results/onnx_speed.json")
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    parser.add_argument("--generator", action=argparse.BooleanOptionalAction, default=True,
                        help="also serve the config with engine: generator (decode, first token, next turn)")
    parser.add_argument("--llama-threads", type=int, nargs="*", default=[1, 2], help="llama.cpp thread counts (none: no peer)")
    args = parser.parse_args()
    if args.render:
        out = json.loads((ROOT / "bench" / "results" / "onnx_speed.json").read_text(encoding="utf-8"))
        print(report.render(out))
        if args.write:
            report.write(out, ROOT)
        return 0
    import onnxruntime_genai as og

    from dragoman.backends.onnx.prepare import default_model_path
    from dragoman.config.paths import dragoman_home

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers and peers on the way out

    began = time.monotonic()
    home = dragoman_home()
    cpu = cpu_info.this_cpu()
    print(f"CPU: {cpu.describe()}", flush=True)
    out: dict[str, Any] = {
        "command": "python " + " ".join([os.path.relpath(__file__, ROOT), *sys.argv[1:]]),
        "machine": f"{platform.machine()}, {psutil.cpu_count()} CPUs",
        "cpu": msgspec.to_builtins(cpu),
        "load_at_start": "/".join(f"{x:.1f}" for x in os.getloadavg()),
        "onnxruntime_genai": og.__version__,
        "python": platform.python_version(),
        "args": {k: v for k, v in vars(args).items() if k not in ("before", "config", "out")},
        "before": args.before_name if args.before else None,
    }
    # The library as an outsider runs it: its default session options (threads spin).
    raw = RawLoop(default_model_path("cpu"), spinning=True)
    servers: dict[str, subprocess.Popen[bytes]] = {}
    ports: dict[str, int] = {}
    peers: dict[str, LlamaCpp] = {}
    checkouts: dict[str, tuple[Path, Path | None]] = {"dragoman": (ROOT, args.config)}
    try:
        if args.generator:
            checkouts[GENERATOR] = (ROOT, speed_engines.generator_config(args.config, Path(os.environ.get("TMPDIR", "/tmp"))))
        if args.before:
            checkouts[args.before_name] = (args.before, None)
        for name, (root, config) in checkouts.items():
            ports[name] = free_port()
            servers[name] = start_server(ports[name], config, root)
        peers = start_peers(home, 4096, args.llama_threads)
        with RssWatch(servers["dragoman"].pid) as rss:
            asyncio.run(run_all(args, ports, raw, peers, servers, out))
    finally:
        for peer in peers.values():
            peer.close()
        for server in servers.values():
            server.terminate()
            server.wait(30)
        if GENERATOR in checkouts:
            checkouts[GENERATOR][1].unlink(missing_ok=True)  # type: ignore[union-attr]
    out["rss_peak_mib"] = {"server": rss.peak_server / MiB, "worker": rss.peak_worker / MiB}
    out["load_at_end"] = "/".join(f"{x:.1f}" for x in os.getloadavg())
    out["seconds"] = time.monotonic() - began
    print("\n" + report.render(out))
    if args.out:
        args.out.write_text(json.dumps(report.rounded(out)) + "\n", encoding="utf-8")
    if args.write:
        report.write(out, ROOT)
    return 0


async def run_all(args: argparse.Namespace, ports: dict[str, int], raw: RawLoop, peers: dict[str, LlamaCpp],
                  servers: dict[str, subprocess.Popen[bytes]], out: dict[str, Any]) -> None:  # fmt: skip
    limits = httpx.Limits(max_connections=16, max_keepalive_connections=16)
    clients = {name: httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=600, limits=limits)
               for name, port in ports.items()}  # fmt: skip
    try:
        await measure(Bench(args, clients, raw, peers), servers, out)
    finally:
        for client in clients.values():
            await client.aclose()


if __name__ == "__main__":
    raise SystemExit(main())
