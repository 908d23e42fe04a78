"""The speed rows of issue #14 on CUDA, for a session lent a GPU (``bench/cuda_speed.sh``
runs it there). Nothing here runs without one: it says what is missing and exits 0.

On CUDA the worker uses the library's Generator (one per request); the library's own
answers to batching there are a batched Generator (static) and the Engine (continuous
batching over a paged KV cache, which the builder exports only for CUDA with fp16/bf16).
This measures, side by side, alternating rounds, on the default SmolLM2 model built for
CUDA:

1. single-stream decode tok/s and time to first token of the Generator;
2. aggregate decode tok/s at 1/4/8 rows: batched Generator, and the Engine when the
   model and the wheel support it;
3. the next turn of a ~1,500-token chat: a cold Generator against one that keeps the
   previous turn and rewinds to the shared prefix (``rewind_to``).

    python bench/cuda_speed.py --model-dir DIR --out OUT/cuda_speed.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]


def load(og: Any, model_dir: Path) -> Any:
    config = og.Config(str(model_dir))
    config.clear_providers()
    config.append_provider("cuda")
    return og.Model(config)


def decode(og: Any, model: Any, ids: list[int], rows: int, tokens: int) -> tuple[float, float]:
    """(aggregate decode tok/s, ms to the first token) of a batched Generator."""
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(ids) + tokens, do_sample=False, batch_size=rows)
    generator = og.Generator(model, params)
    began = time.perf_counter()
    generator.append_tokens(np.tile(np.asarray(ids, dtype=np.int32), (rows, 1)))
    generator.generate_next_token()
    generator.get_next_tokens()
    first = time.perf_counter()
    steps = 0
    while not generator.is_done() and steps < tokens - 1:
        generator.generate_next_token()
        steps += 1
    generator.get_next_tokens()
    return rows * steps / (time.perf_counter() - first), (first - began) * 1e3


def engine_aggregate(og: Any, model: Any, ids: list[int], requests: int, tokens: int) -> float | None:
    """Aggregate tok/s of ``requests`` requests through ``og.Engine``; None where this
    model or wheel has no Engine (a non-paged export)."""
    try:
        engine = og.Engine(model)
        buffer = engine.create_event_buffer(256)
        made = []
        for _ in range(requests):
            request = engine.create_request()
            options = og.TurnOptions(request)
            options.set_max_generated_tokens(tokens)
            request.begin_turn(np.asarray(ids, dtype=np.int32), options)
            made.append(request)
    except (AttributeError, RuntimeError, TypeError) as exc:
        print(f"  Engine unavailable: {type(exc).__name__}: {exc}", flush=True)
        return None
    token, ended = int(og.EngineEventFlags.TOKEN), int(og.EngineEventFlags.TURN_FINISHED) | int(og.EngineEventFlags.FAILED)
    began, generated, finished = time.perf_counter(), 0, 0
    while finished < requests and time.perf_counter() - began < 120:
        engine.run(buffer)
        for i in range(len(buffer)):
            flags = int(buffer[i].flags)
            generated += bool(flags & token)
            finished += bool(flags & ended)
    return generated / (time.perf_counter() - began)


def next_turn(og: Any, model: Any, previous: list[int], current: list[int]) -> tuple[float, float]:
    """(cold ms, rewound ms) to the first token of ``current``, which extends ``previous``."""

    def first_token(generator: Any, ids: list[int]) -> float:
        began = time.perf_counter()
        generator.append_tokens(np.asarray(ids, dtype=np.int32))
        generator.generate_next_token()
        generator.get_next_tokens()
        return (time.perf_counter() - began) * 1e3

    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(current) + 32, do_sample=False)
    cold = first_token(og.Generator(model, params), current)
    warm = og.Generator(model, params)
    first_token(warm, previous)
    shared = next(i for i, (a, b) in enumerate(zip([*previous, -1], current)) if a != b)
    warm.rewind_to(shared)
    return cold, first_token(warm, current[shared:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    try:
        import onnxruntime_genai as og
    except ImportError as exc:
        print(f"onnxruntime-genai-cuda is not installed here ({exc}); nothing measured")
        return 0
    if not og.is_cuda_available():
        print(f"this onnxruntime-genai ({og.__id__ if hasattr(og, '__id__') else '?'}) has no CUDA; nothing measured")
        return 0
    import speed_prompts as prompts
    from onnx_decode import PROMPT

    model = load(og, args.model_dir)
    tokenizer = og.Tokenizer(model)
    count = lambda text: len(tokenizer.encode(text))  # noqa: E731
    chat = "".join(f"<|im_start|>user\n{prompts.user_turn(count, turn, 250)}<|im_end|>\n<|im_start|>assistant\n"
                   f"Noted: part {turn}.<|im_end|>\n" for turn in range(1, 6))  # fmt: skip
    previous = tokenizer.encode(chat + "<|im_start|>user\nAnd the last part?<|im_end|>\n<|im_start|>assistant\n")
    current = tokenizer.encode(chat + "<|im_start|>user\nAnd the last part?<|im_end|>\n<|im_start|>assistant\n"
                               "Noted.<|im_end|>\n<|im_start|>user\nSummarise everything.<|im_end|>\n"
                               "<|im_start|>assistant\n")  # fmt: skip
    ids = tokenizer.encode(f"<|im_start|>user\n{PROMPT}<|im_end|>\n<|im_start|>assistant\n")
    out: dict[str, Any] = {"device_type": str(model.device_type), "onnxruntime_genai": og.__version__,
                           "batched_generator": {}, "engine": {}, "ttft_ms": [], "next_turn": [],
                           "chat_tokens": len(current)}  # fmt: skip
    for rep in range(args.rounds):
        for rows in (1, 4, 8):
            rate, ttft = decode(og, model, ids, rows, args.tokens)
            out["batched_generator"].setdefault(str(rows), []).append(rate)
            if rows == 1:
                out["ttft_ms"].append(ttft)
            out["engine"].setdefault(str(rows), []).append(engine_aggregate(og, model, ids, rows, args.tokens))
        out["next_turn"].append(next_turn(og, model, previous, current))
        print(f"round {rep + 1}: {json.dumps({k: v for k, v in out.items() if k in ('batched_generator', 'next_turn')})}",
              flush=True)  # fmt: skip
    med = statistics.median
    for rows, rates in out["batched_generator"].items():
        engine = [r for r in out["engine"][rows] if r is not None]
        print(f"{rows} rows: batched Generator {med(rates):.0f} tok/s; Engine {med(engine):.0f} tok/s" if engine else
              f"{rows} rows: batched Generator {med(rates):.0f} tok/s; Engine n/a")  # fmt: skip
    cold, warm = zip(*out["next_turn"], strict=True)
    print(f"next turn of {len(current)} tokens: cold {med(cold):.0f} ms, rewound {med(warm):.0f} ms")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
