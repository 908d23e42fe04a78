"""The logits-processor part of ``onnx_decode.py``: what each processor-backed option
costs a token, measured two ways.

* In this process, on rows of real logits captured from the model: exactly the work the
  worker adds per token when a request has a processor (``Generation._prepare_logits``:
  reading the logits and the sequence, ``LogitsProcessor.process``, writing the logits
  back). Short timings, so taking the fastest of a few passes removes the background load.
* Through the server (Ollama ``/api/chat``): the worker's own ``eval_duration /
  eval_count``, a check that the end-to-end figure moves the same way (noisy: a token
  step is ~10 ms and the machine is shared).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

SAMPLING_BASE: dict[str, Any] = {"temperature": 0.8, "seed": 7}
# (label, Ollama options on top of SAMPLING_BASE). "all neutral" must cost what plain sampling does.
VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("plain sampling", {}),
    ("all neutral", {"min_p": 0.0, "tfs_z": 1.0, "mirostat": 0, "repeat_penalty": 1.0,
                     "presence_penalty": 0.0, "frequency_penalty": 0.0}),
    ("min_p 0.05", {"min_p": 0.05}),
    ("presence_penalty 0.5", {"presence_penalty": 0.5}),
    ("frequency_penalty 0.5", {"frequency_penalty": 0.5}),
    ("repeat_penalty 1.1, repeat_last_n 64", {"repeat_penalty": 1.1, "repeat_last_n": 64}),
    ("repeat_penalty 1.1 (library's)", {"repeat_penalty": 1.1}),
    ("tfs_z 0.95", {"tfs_z": 0.95}),
    ("mirostat 1", {"mirostat": 1}),
    ("mirostat 2", {"mirostat": 2}),
]  # fmt: skip


def planned(options: dict[str, Any]) -> Any:
    """The worker's ``Processing`` for these options, or None when no processor runs."""
    from dragoman.adapters.canonical import SamplingOptions
    from dragoman.backends.onnx.sampling_plan import plan_sampling, processing_active

    processing = plan_sampling(SamplingOptions(**{**SAMPLING_BASE, **options}))[1]
    return processing if processing_active(processing) else None


def in_process_costs(og: Any, model: Any, prompt_ids: list[int], steps: int = 64, passes: int = 5) -> dict[str, Any]:
    """µs/token each variant adds in the worker's loop: the library calls (once, the same
    for every processor) and the numpy pipeline, on ``steps`` rows of real logits."""
    from dragoman.backends.onnx.worker.logits_processors import LogitsProcessor

    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt_ids) + steps + 1, do_sample=True, temperature=0.8, random_seed=7)
    generator = og.Generator(model, params)
    generator.append_tokens(np.asarray(prompt_ids, dtype=np.int32))
    rows, sequences, library_ns = [], [], []
    for _ in range(steps):
        logits = generator.get_logits()  # runs the model: a cost every token pays anyway
        began = time.perf_counter_ns()
        logits = generator.get_logits()
        row = np.asarray(logits, dtype=np.float32).reshape(-1)
        sequence = generator.get_sequence(0)
        generator.set_logits(row.reshape(np.shape(logits)).astype(np.float32))
        library_ns.append(time.perf_counter_ns() - began)
        rows.append(row.copy())
        sequences.append(np.array(sequence))
        generator.generate_next_token()
    costs: dict[str, Any] = {
        "steps": steps, "passes": passes, "library_us": statistics.median(library_ns) / 1e3, "numpy_us": {},
    }  # fmt: skip
    for label, options in VARIANTS:
        processing = planned(options)
        if processing is None:
            costs["numpy_us"][label] = None
            continue
        best = [float("inf")] * steps
        for _ in range(passes):
            processor = LogitsProcessor(processing)  # mirostat's state starts afresh every pass
            for i, (row, sequence) in enumerate(zip(rows, sequences, strict=True)):
                began = time.perf_counter_ns()
                processed, _ = processor.process(row, sequence)
                processed.astype(np.float32)
                best[i] = min(best[i], time.perf_counter_ns() - began)
        costs["numpy_us"][label] = statistics.median(best) / 1e3
    return costs


async def over_http(stream: Callable[[dict[str, Any]], Awaitable[Any]], rounds: int, tokens: int) -> dict[str, Any]:
    """Per variant: the worker's µs/token and the client's decode tok/s, every round;
    ``stream(options)`` runs one Ollama chat and returns its ``Stream``."""
    table: dict[str, dict[str, Any]] = {
        label: {"processor": planned(options) is not None, "us_per_token": [], "client_tps": []}
        for label, options in VARIANTS
    }
    labels = list(table)
    for rep in range(rounds):
        for label in labels[rep % len(labels) :] + labels[: rep % len(labels)]:
            options = {**SAMPLING_BASE, **dict(VARIANTS)[label], "num_predict": tokens}
            result = await stream(options)
            table[label]["us_per_token"].append(result.eval_ns / 1e3 / max(result.tokens, 1))
            table[label]["client_tps"].append(result.decode_tps)
        print(f"  round {rep + 1} done", flush=True)
    return table
