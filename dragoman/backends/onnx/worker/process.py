"""The worker process: one loaded model, its requests run by :mod:`backends.onnx.worker.loop`.

``python -m dragoman.backends.onnx.worker.process '<WorkerConfig JSON>'``. Here the process is set up: a
reader thread turns stdin frames into commands on a queue, a preparation thread
(:mod:`backends.onnx.worker.request_preparation`) tokenises prompts and compiles grammars and puts its
results on the same queue, the model is loaded (:mod:`backends.onnx.worker.loading`) and the
server told it is ready; then the main thread runs the loop. The library holds the GIL
while it computes, which is why this runs in its own process and not in the server's.

Frames go out on a private copy of stdout; fd 1 itself is pointed at stderr so that
nothing a native library prints can corrupt the protocol.
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from dragoman.backends.onnx.worker.generator_cache import open_cache
from dragoman.backends.onnx.worker.loading import load, model_context_length
from dragoman.backends.onnx.worker.request_preparation import Preparation
from dragoman.backends.onnx.worker_protocol import LoadFailed, Ready, Shutdown, WorkerConfig, decode_command, encode_frame, read_frame
from dragoman.backends.onnx.worker.loop import Worker

log = logging.getLogger("dragoman.onnx.worker")


def _read_commands(stream: BinaryIO, commands: queue.Queue[Any]) -> None:
    """Reader thread: stdin frames → queue. End of stdin (the server is gone) → Shutdown."""
    try:
        while (body := read_frame(stream)) is not None:
            commands.put(decode_command(body))
    except Exception as exc:  # a broken pipe or frame: stop cleanly rather than hang
        log.error("command stream broken: %s", exc)
    commands.put(Shutdown())


def main(argv: list[str]) -> int:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format=f"onnx-worker[{os.getpid()}] %(levelname)s %(message)s"
    )
    frames_fd = os.dup(1)
    os.dup2(2, 1)
    out = os.fdopen(frames_fd, "wb", buffering=1 << 16)
    config = msgspec.json.decode(argv[0], type=WorkerConfig)
    commands: queue.Queue[Any] = queue.Queue()
    threading.Thread(target=_read_commands, args=(sys.stdin.buffer, commands), daemon=True, name="commands").start()
    began = time.perf_counter_ns()
    model_dir = Path(config.model_path)
    try:
        import onnxruntime_genai as og

        model, engine, provider, engine_reason = load(config)
        eos_ids = sorted(int(i) for i in og.Tokenizer(model if model is not None else og.Config(str(model_dir))).eos_token_ids)
        preparation = Preparation(
            model_dir, eos_ids, commands, context_length=model_context_length(model_dir),
            grammar_timeout=config.grammar_timeout, grammar_memory=config.grammar_memory,
        )  # fmt: skip
        kept = None
        if engine is None:
            kept = open_cache(
                model_dir, config.prefix_cache_bytes, config.prefix_cache_entries, preparation.context_length,
                str(model.device_type),
            )  # fmt: skip
        worker = Worker(og, model, model_dir, out, commands, preparation, engine, kept)
    except Exception as exc:
        out.write(encode_frame(LoadFailed(f"{type(exc).__name__}: {exc}")))
        out.flush()
        return 1
    preparation.begin()
    ready = Ready(
        provider=provider,
        device_type=str(model.device_type) if model is not None else "CPU",
        context_length=preparation.context_length or 0,
        load_ns=time.perf_counter_ns() - began,
        eos_token_ids=sorted(worker.eos_ids),
        engine="batch" if engine is not None else "generator",
        engine_reason=engine_reason,
    )
    worker.send(ready)
    out.flush()
    try:
        worker.run()
    except BrokenPipeError:
        return 0
    finally:
        preparation.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
