"""Prefix reuse and first-token overhead on the library's Generator path (issue 23,
items 4 and 5): a dragoman serving the default model with ``engine: generator`` (what
CUDA and DirectML run) against itself cold and against the raw onnxruntime-genai loop.

    DRAGOMAN_HOME=.dragoman-test-home .venv/bin/python bench/generator_speed.py \\
        [--engine generator|auto] [--rounds 3] [--pairs 20]

Rows:

1. the next turn of a 6-turn chat of ~1,500 tokens, sent the moment the server has
   answered turn 5, against the same conversation cold (a different first line):
   time to the first content delta, ratio per round, medians;
2. first token of a 54-token prompt (a different first line every time, so nothing is
   reused): dragoman (request sent → first content delta) and the raw loop (template +
   tokenize → first token) alternating in pairs, median of the per-pair differences;
   ``--idle 1.5``: each after a pause (the worker hands its free heap back after 1 s idle).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import onnx_speed as speed  # noqa: E402
import speed_prompts as prompts  # noqa: E402
from onnx_decode import PROMPT, RawLoop, free_port, start_server  # noqa: E402

DRAGOMAN = "dragoman"


def config_file(engine: str, model_dir: Path, folder: Path) -> Path:
    path = folder / "generator_speed.yaml"
    path.write_text(
        f"models:\n  - name: smollm2:135m\n    backend: onnx\n    path: {model_dir}\n    provider: cpu\n"
        f"    context_length: 2048\n    engine: {engine}\n",
        encoding="utf-8",
    )
    return path


async def chat(bench: speed.Bench, rounds: int) -> None:
    args = bench.args
    warm, cold, lengths = [], [], []
    for rep in range(rounds):
        turns = speed.six_turn_chat(bench, args.reply_tokens, conversation=500 + rep)
        lengths.append(len(bench.raw.prompt_ids(turns[-1])))
        await bench.generate(DRAGOMAN, turns[4], args.reply_tokens)  # turn 5, as the client just sent it
        warm.append((await bench.generate(DRAGOMAN, turns[5], args.next_tokens)).ttft_ms)
        cold_prompt = prompts.with_nonce(turns[5], secrets.token_hex(4))
        cold.append((await bench.generate(DRAGOMAN, cold_prompt, args.next_tokens)).ttft_ms)
        print(f"  round {rep + 1}: next turn {warm[-1]:.0f} ms, cold {cold[-1]:.0f} ms, {warm[-1] / cold[-1]:.2f}x", flush=True)
    ratios = [w / c for w, c in zip(warm, cold, strict=True)]
    print(f"6-turn chat ({statistics.median(lengths):.0f} prompt tokens): next turn {statistics.median(warm):.0f} ms, "
          f"cold {statistics.median(cold):.0f} ms, median ratio {statistics.median(ratios):.2f}x cold", flush=True)  # fmt: skip


async def first_token(bench: speed.Bench, pairs: int) -> None:
    ours, raw, differences = [], [], []
    for k in range(pairs):
        numbered = [{"role": "system", "content": f"Session {secrets.token_hex(3)} {k}. You are a helpful AI assistant."},
                    {"role": "user", "content": PROMPT}]  # fmt: skip
        times = {}
        for variant in speed.rotated([DRAGOMAN, speed.RAW], k):
            await asyncio.sleep(bench.args.idle)
            times[variant] = (await bench.generate(variant, numbered, 2, reuse=False)).ttft_ms
        ours.append(times[DRAGOMAN])
        raw.append(times[speed.RAW])
        differences.append(times[DRAGOMAN] - times[speed.RAW])
    print(f"first token, {len(bench.raw.prompt_ids(numbered))}-token prompt, {pairs} pairs: dragoman "
          f"{statistics.median(ours):.1f} ms, raw loop {statistics.median(raw):.1f} ms, median of per-pair differences "
          f"{statistics.median(differences):+.1f} ms (quartiles {statistics.quantiles(differences, n=4)[0]:+.1f} / "
          f"{statistics.quantiles(differences, n=4)[2]:+.1f})", flush=True)  # fmt: skip


async def run(args: argparse.Namespace, port: int, raw: RawLoop) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:
        bench = speed.Bench(args, {DRAGOMAN: client}, raw, {})
        for _ in range(2):  # the model's load and first runs
            await bench.generate(DRAGOMAN, [{"role": "user", "content": PROMPT}], 16)
        if "chat" in args.only:
            await chat(bench, args.rounds)
        if "first" in args.only:
            await first_token(bench, args.pairs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="generator", choices=["generator", "auto", "batch"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--turn-tokens", type=int, default=150)
    parser.add_argument("--reply-tokens", type=int, default=96)
    parser.add_argument("--next-tokens", type=int, default=28)
    parser.add_argument("--raw-spinning", type=int, default=1, help="the raw loop's threads spin (as the library's default)")
    parser.add_argument("--only", nargs="*", default=["chat", "first"])
    parser.add_argument("--idle", type=float, default=0.0, help="seconds idle before each first-token request")
    args = parser.parse_args()
    from dragoman.backends.onnx.prepare import default_model_path

    print(f"load at start {'/'.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    model_dir = default_model_path("cpu")
    raw = RawLoop(model_dir, spinning=bool(args.raw_spinning))
    with tempfile.TemporaryDirectory() as folder:
        port = free_port()
        server = start_server(port, config_file(args.engine, model_dir, Path(folder)))
        try:
            asyncio.run(run(args, port, raw))
        finally:
            server.terminate()
            server.wait(30)
    print(f"load at end {'/'.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
