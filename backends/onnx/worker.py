"""The worker process: one loaded model, every active request interleaved.

``python -m backends.onnx.worker '<WorkerConfig JSON>'``. A reader thread turns stdin
frames into commands on a queue; the main thread drains that queue between token
steps and advances each active generation by one token per round, so a new or
cancelled request takes effect within a token. The library holds the GIL while it
computes, which is why this runs in its own process and not in the server's.

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
import numpy as np

from backends.onnx.generation import Generation
from backends.onnx.protocol import (
    Cancel,
    Command,
    Done,
    Failed,
    LoadFailed,
    Ready,
    Refused,
    Report,
    Shutdown,
    Start,
    Started,
    WorkerConfig,
    decode_command,
    encode_frame,
    read_frame,
)
from backends.onnx.prompt_tokens import PromptTokenizer
from backends.onnx.providers import load_model
from backends.onnx.vocab import load_token_bytes

log = logging.getLogger("dragoman.onnx.worker")


class Worker:
    def __init__(self, og: Any, model: Any, model_dir: Path, out: BinaryIO, commands: queue.Queue[Command]) -> None:
        self.og = og
        self.model = model
        self.out = out
        self.commands = commands
        self.tokenizer = og.Tokenizer(model)
        self.prompt_tokenizer = PromptTokenizer(model_dir, self.tokenizer)
        self._special_tokenizer: Any = None
        self.eos_ids = frozenset(int(i) for i in self.tokenizer.eos_token_ids)
        self.token_bytes = load_token_bytes(model_dir)
        self.context_length = _model_context_length(model_dir)
        self.active: dict[int, Generation] = {}

    def send(self, report: Report) -> None:
        self.out.write(encode_frame(report))

    def run(self) -> None:
        while True:
            for command in self._drain(block=not self.active):
                if isinstance(command, Shutdown):
                    return
                if isinstance(command, Start):
                    self._start_safely(command)
                elif isinstance(command, Cancel):
                    self._cancel(command.request_id)
            for generation in list(self.active.values()):
                self._step(generation)
            self.out.flush()

    def _drain(self, *, block: bool) -> list[Command]:
        commands = []
        if block:
            self.out.flush()
            commands.append(self.commands.get())
        while True:
            try:
                commands.append(self.commands.get_nowait())
            except queue.Empty:
                return commands

    def _start_safely(self, start: Start) -> None:
        try:
            self._start(start)
        except Exception as exc:  # one bad request must not take the model down
            log.exception("request %s could not start", start.request_id)
            self.active.pop(start.request_id, None)
            self.send(Failed(start.request_id, f"could not start: {type(exc).__name__}: {exc}"))

    def _start(self, start: Start) -> None:
        rid = start.request_id
        tokenizer = self._tokenizer_for(start)
        prompt_ids = self.prompt_tokenizer.encode(start.prompt)
        n = len(prompt_ids)
        context = min(start.context_length, self.context_length) if self.context_length else start.context_length
        if n >= context:
            message = f"the prompt is {n} tokens, which does not fit the context length of {context} tokens"
            self.send(Refused(rid, "context", message, prompt_tokens=n, context_length=context))
            return
        budget = context if start.max_new_tokens is None else min(context, n + start.max_new_tokens)
        try:
            generation = Generation(
                self.og, self.model, tokenizer, start, prompt_ids, budget, self.eos_ids, self.token_bytes
            )
        except RuntimeError as exc:  # the library's error for a bad schema or grammar
            self.send(Refused(rid, "invalid", f"invalid constraint: {exc}", prompt_tokens=n, context_length=context))
            return
        self.send(Started(rid, prompt_tokens=n, max_length=budget))
        if start.max_new_tokens == 0:
            self.send(generation.done("length"))
            return
        try:
            generation.prefill()
        except Exception as exc:
            self.send(Failed(rid, f"prompt evaluation failed: {exc}"))
            return
        self.active[rid] = generation

    def _step(self, generation: Generation) -> None:
        try:
            tokens, done = generation.step()
        except Exception as exc:
            log.exception("request %s failed", generation.request_id)
            self.active.pop(generation.request_id, None)
            self.send(Failed(generation.request_id, f"generation failed: {exc}"))
            return
        if tokens is not None:
            self.send(tokens)
        if done is not None:
            self.active.pop(generation.request_id, None)
            self.send(done)

    def _cancel(self, request_id: int) -> None:
        generation = self.active.pop(request_id, None)
        if generation is not None:
            self.send(generation.done("cancelled"))
        else:  # finished already, or never started: confirm anyway
            self.send(Done(request_id, "cancelled", prompt_tokens=0, completion_tokens=0))

    def _tokenizer_for(self, start: Start) -> Any:
        if not start.special_tokens:
            return self.tokenizer
        if self._special_tokenizer is None:
            self._special_tokenizer = self.og.Tokenizer(self.model)
            self._special_tokenizer.update_options(skip_special_tokens=False)
        return self._special_tokenizer


def _model_context_length(model_dir: Path) -> int | None:
    try:
        config = msgspec.json.decode((model_dir / "genai_config.json").read_bytes())
        return int(config["model"]["context_length"])
    except (OSError, KeyError, TypeError, ValueError, msgspec.DecodeError):
        return None


def _read_commands(stream: BinaryIO, commands: queue.Queue[Command]) -> None:
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
    commands: queue.Queue[Command] = queue.Queue()
    threading.Thread(target=_read_commands, args=(sys.stdin.buffer, commands), daemon=True, name="commands").start()
    began = time.perf_counter_ns()
    try:
        import onnxruntime_genai as og

        model, provider = load_model(
            Path(config.model_path), config.providers, provider_options=config.provider_options, threads=config.threads
        )  # type: ignore[arg-type]
        worker = Worker(og, model, Path(config.model_path), out, commands)
    except Exception as exc:
        out.write(encode_frame(LoadFailed(f"{type(exc).__name__}: {exc}")))
        out.flush()
        return 1
    ready = Ready(
        provider=provider,
        device_type=str(model.device_type),
        context_length=worker.context_length or 0,
        load_ns=time.perf_counter_ns() - began,
        eos_token_ids=sorted(worker.eos_ids),
    )
    worker.send(ready)
    out.flush()
    try:
        worker.run()
    except BrokenPipeError:
        return 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
