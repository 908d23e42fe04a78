"""Which batching wins on CPU with onnxruntime-genai 0.18 (issue #14): the library's
batched Generator (``batch_size`` > 1, static: every row starts together, none joins
later) against running the exported decoder's session directly (what the worker's batch
engine does, ``dragoman/backends/onnx/worker/decoder.py``), side by side in one run, alternating.

    .venv/bin/python bench/batching_research.py [--rounds 3] [--tokens 64]

For 1, 2, 4 and 8 rows of the same 48-token prompt: aggregate decode tokens/s (new
tokens of all rows over the decode time, prefill left out) and the prefill time of a
1,500-token prompt in one pass against 64-token chunks. Prints a table and writes
``bench/results/batching_research.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from onnx_decode import PROMPT, RawLoop, rotated  # noqa: E402


def generator_batch(raw: RawLoop, ids: list[int], rows: int, tokens: int) -> float:
    og = raw.og
    params = og.GeneratorParams(raw.model)
    params.set_search_options(max_length=len(ids) + tokens, do_sample=False, batch_size=rows)
    generator = og.Generator(raw.model, params)
    generator.append_tokens(np.tile(np.asarray(ids, dtype=np.int32), (rows, 1)))
    generator.generate_next_token()
    began, steps = time.perf_counter(), 0
    while not generator.is_done() and steps < tokens - 1:
        generator.generate_next_token()
        steps += 1
    return rows * steps / (time.perf_counter() - began)


def session_batch(decoder: object, ids: list[int], rows: int, tokens: int) -> float:
    from dragoman.backends.onnx.worker.decoder import Decoder

    assert isinstance(decoder, Decoder)
    slab = decoder.new_slab(len(ids) + tokens + 1)
    slab.ensure(rows, len(ids) + tokens + 1)
    prompt = np.asarray(ids, dtype=np.int64)
    for row in range(rows):
        decoder.prefill(slab, row, prompt, 0)
    lengths = np.full(rows, len(ids), dtype=np.int64)
    next_tokens = np.full(rows, 1, dtype=np.int64)
    began = time.perf_counter()
    for _ in range(tokens - 1):
        logits = decoder.decode(slab, next_tokens, lengths)
        next_tokens = logits.argmax(-1).astype(np.int64)
        lengths += 1
    return rows * (tokens - 1) / (time.perf_counter() - began)


def prefill_times(raw: RawLoop, decoder: object, ids: list[int]) -> dict[str, float]:
    og = raw.og
    params = og.GeneratorParams(raw.model)
    params.set_search_options(max_length=len(ids) + 2, do_sample=False)
    generator = og.Generator(raw.model, params)
    began = time.perf_counter()
    generator.append_tokens(np.asarray(ids, dtype=np.int32))
    library = time.perf_counter() - began
    slab = decoder.new_slab(len(ids) + 2)  # type: ignore[attr-defined]
    slab.ensure(1, len(ids) + 2)
    prompt = np.asarray(ids, dtype=np.int64)
    began = time.perf_counter()
    decoder.prefill(slab, 0, prompt, 0)  # type: ignore[attr-defined]
    whole = time.perf_counter() - began
    began = time.perf_counter()
    for start in range(0, len(prompt), 64):
        decoder.prefill(slab, 0, prompt[start : start + 64], start)  # type: ignore[attr-defined]
    chunked = time.perf_counter() - began
    return {"library Generator, one pass": library * 1e3, "session, one pass": whole * 1e3,
            "session, 64-token chunks": chunked * 1e3}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    from dragoman.backends.onnx.worker.decoder import Decoder
    from dragoman.backends.onnx.prepare import default_model_path

    model_dir = default_model_path("cpu")
    raw = RawLoop(model_dir, spinning=False)
    decoder = Decoder(model_dir)
    ids = [int(i) for i in raw.prompt_ids(PROMPT)]
    long_ids = (ids * 40)[:1500]
    variants = {"library Generator, batch_size": generator_batch, "session, one row each": session_batch}
    results: dict[str, dict[str, list[float]]] = {name: {} for name in variants}
    prefill: dict[str, list[float]] = {}
    for rep in range(args.rounds):
        for rows in (1, 2, 4, 8):
            for name in rotated(list(variants), rep):
                target = raw if name.startswith("library") else decoder
                results[name].setdefault(str(rows), []).append(variants[name](target, ids, rows, args.tokens))
        for key, value in prefill_times(raw, decoder, long_ids).items():
            prefill.setdefault(key, []).append(value)
        print(f"round {rep + 1}: " + "; ".join(
            f"{n}: " + "/".join(f"{v[-1]:.0f}" for v in r.values()) for n, r in results.items()
        ) + " tok/s at 1/2/4/8 rows", flush=True)  # fmt: skip
    med = statistics.median
    print("\n| rows | " + " | ".join(variants) + " | session ÷ library |")
    print("|---|" + "---|" * (len(variants) + 1))
    for rows in ("1", "2", "4", "8"):
        a, b = (med(results[n][rows]) for n in variants)
        print(f"| {rows} | {a:.0f} | {b:.0f} | {b / a:.2f}× |")
    print("\n| 1,500-token prompt | ms |\n|---|---|")
    for key, values in prefill.items():
        print(f"| {key} | {med(values):,.0f} |")
    out = ROOT / "bench" / "results" / "batching_research.json"
    out.write_text(json.dumps({"decode_tok_s": results, "prefill_ms": prefill, "tokens": args.tokens}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
