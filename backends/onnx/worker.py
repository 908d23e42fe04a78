"""The worker process: one loaded model, every active request interleaved.

``python -m backends.onnx.worker '<WorkerConfig JSON>'``. A reader thread turns stdin
frames into commands on a queue; a preparation thread (:mod:`backends.onnx.preparation`)
tokenises prompts and compiles grammars and puts its results on the same queue; the
main thread drains that queue between rounds and, each round, advances every
generation that is not too far ahead of its consumer by one token, and evaluates one
chunk of at most one waiting prompt. A round stays short whatever a request asks, so
a new, cancelled or credited request takes effect within a token, and a Ping is
answered within a round (which is how the server tells a stuck worker from a busy
one). The library holds the GIL while it computes, which is why this runs in its own
process and not in the server's.

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

from backends.onnx.generation import Generation, GuideFailed
from backends.onnx.preparation import NotPrepared, Prepared, Preparation
from backends.onnx.protocol import (
    Cancel,
    Command,
    Credit,
    Done,
    Failed,
    LoadFailed,
    Ping,
    Pong,
    Ready,
    Report,
    Shutdown,
    Start,
    Started,
    WorkerConfig,
    decode_command,
    encode_frame,
    read_frame,
)
from backends.onnx.providers import load_model
from backends.onnx.vocab import load_token_bytes

log = logging.getLogger("dragoman.onnx.worker")

# A prompt chunk takes about this share of the time the round's decoding steps took
# (so other streams' gaps grow by about half while a long prompt is evaluated), or
# LONE_CHUNK_S when nothing else decodes.
PREFILL_SHARE = 0.5
LONE_CHUNK_S = 0.25


class Worker:
    def __init__(
        self, og: Any, model: Any, model_dir: Path, out: BinaryIO, commands: queue.Queue[Any], preparation: Preparation
    ) -> None:
        self.og = og
        self.model = model
        self.out = out
        self.commands = commands
        self.preparation = preparation
        self.tokenizer = og.Tokenizer(model)
        preparation.tokenizer.library = self.tokenizer
        self._special_tokenizer: Any = None
        self.eos_ids = frozenset(int(i) for i in self.tokenizer.eos_token_ids)
        self.token_bytes = load_token_bytes(model_dir)
        self.active: dict[int, Generation] = {}  # started: prefilling or decoding
        self.pending: set[int] = set()  # being prepared
        self._seconds_per_prompt_token = 0.002  # learnt from each chunk

    def send(self, report: Report) -> None:
        self.out.write(encode_frame(report))

    def run(self) -> None:
        while True:
            idle = not any(g.runnable for g in self.active.values())
            for item in self._drain(block=idle):
                if isinstance(item, Shutdown):
                    return
                self._handle(item)
            self._round()
            self.out.flush()

    def _handle(self, item: Command | Prepared | NotPrepared) -> None:
        if isinstance(item, Start):
            self.pending.add(item.request_id)
            self.preparation.submit(item)
        elif isinstance(item, Cancel):
            self._cancel(item.request_id)
        elif isinstance(item, Credit):
            generation = self.active.get(item.request_id)
            if generation is not None:
                generation.consumed = max(generation.consumed, item.consumed)
        elif isinstance(item, Ping):
            self.send(Pong(item.seq))
        elif isinstance(item, Prepared | NotPrepared):
            if item.start.request_id in self.pending:  # else cancelled meanwhile
                self.pending.discard(item.start.request_id)
                self._begin(item)

    def _drain(self, *, block: bool) -> list[Any]:
        items = []
        if block:
            self.out.flush()
            items.append(self.commands.get())
        while True:
            try:
                items.append(self.commands.get_nowait())
            except queue.Empty:
                return items

    def _begin(self, prepared: Prepared | NotPrepared) -> None:
        start = prepared.start
        rid = start.request_id
        if isinstance(prepared, NotPrepared):
            self.send(prepared.refusal or Failed(rid, prepared.failure or "could not start"))
            return
        n = len(prepared.prompt_ids)
        budget = prepared.context if start.max_new_tokens is None else min(prepared.context, n + start.max_new_tokens)
        try:
            generation = Generation(
                self.og, self.model, self._tokenizer_for(start), start, prepared.prompt_ids, budget, self.eos_ids,
                self.token_bytes, prepared.guide,
            )  # fmt: skip
        except Exception as exc:  # one bad request must not take the model down
            log.exception("request %s could not start", rid)
            self.send(Failed(rid, f"could not start: {type(exc).__name__}: {exc}"))
            return
        self.send(Started(rid, prompt_tokens=n, max_length=budget))
        if start.max_new_tokens == 0:
            self.send(generation.done("length"))
            return
        self.active[rid] = generation

    def _round(self) -> None:
        began = time.perf_counter()
        stepping = [g for g in self.active.values() if g.prefilled and g.runnable]
        for generation in stepping:
            self._step(generation)
        decoding = time.perf_counter() - began
        waiting = next((g for g in self.active.values() if not g.prefilled), None)
        if waiting is not None:
            # (Timed against what actually decoded: an empty round takes microseconds,
            # which made every lone prompt go one token a pass.)
            target = PREFILL_SHARE * decoding if stepping else LONE_CHUNK_S
            self._prefill(waiting, max(1, int(target / self._seconds_per_prompt_token)))

    def _prefill(self, generation: Generation, tokens: int) -> None:
        began = time.perf_counter()
        try:
            done = generation.prefill(tokens)
        except Exception as exc:
            log.exception("request %s failed in prompt evaluation", generation.request_id)
            self.active.pop(generation.request_id, None)
            self.send(Failed(generation.request_id, f"prompt evaluation failed: {exc}"))
            return
        per_token = (time.perf_counter() - began) / done
        self._seconds_per_prompt_token = 0.7 * self._seconds_per_prompt_token + 0.3 * per_token

    def _step(self, generation: Generation) -> None:
        try:
            tokens, done = generation.step()
        except GuideFailed as exc:
            self.active.pop(generation.request_id, None)
            self.send(Failed(generation.request_id, str(exc), status=400))
            return
        except Exception as exc:
            log.exception("request %s failed", generation.request_id)
            self.active.pop(generation.request_id, None)
            self.send(Failed(generation.request_id, f"generation failed: {exc}"))
            return
        self.send(tokens)
        if done is not None:
            self.active.pop(generation.request_id, None)
            self.send(done)

    def _cancel(self, request_id: int) -> None:
        generation = self.active.pop(request_id, None)
        self.pending.discard(request_id)
        if generation is not None:
            self.send(generation.done("cancelled"))
        else:  # finished already, being prepared, or never started: confirm anyway
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

        model, provider = load_model(
            model_dir, config.providers, provider_options=config.provider_options, threads=config.threads
        )  # type: ignore[arg-type]
        eos_ids = sorted(int(i) for i in og.Tokenizer(model).eos_token_ids)
        preparation = Preparation(
            model_dir, eos_ids, commands, context_length=_model_context_length(model_dir),
            grammar_timeout=config.grammar_timeout, grammar_memory=config.grammar_memory,
        )  # fmt: skip
        worker = Worker(og, model, model_dir, out, commands, preparation)
    except Exception as exc:
        out.write(encode_frame(LoadFailed(f"{type(exc).__name__}: {exc}")))
        out.flush()
        return 1
    preparation.begin()
    ready = Ready(
        provider=provider,
        device_type=str(model.device_type),
        context_length=preparation.context_length or 0,
        load_ns=time.perf_counter_ns() - began,
        eos_token_ids=sorted(worker.eos_ids),
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
