"""The worker process: one loaded model, every active request interleaved.

On CPU the batch engine (:mod:`backends.onnx.batch`) runs the rounds: one forward pass
advances every generation, a long prompt is prefilled in chunks between them, and the
KV of recent prompts is reused. Elsewhere (CUDA, DirectML, ``engine: generator``, or a
model the engine cannot run) each request has a library Generator, as described here:

``python -m backends.onnx.worker '<WorkerConfig JSON>'``. A reader thread turns stdin
frames into commands on a queue; a preparation thread (:mod:`backends.onnx.preparation`)
tokenises prompts and compiles grammars and puts its results on the same queue; the
main thread drains that queue between rounds and, each round, advances every
generation that is not too far ahead of its consumer by one token, and evaluates one
chunk of at most one waiting prompt (the one with the fewest tokens left). A round
stays short whatever a request asks, so a new, cancelled or credited request takes
effect within a token, and a Ping is
answered within a round (which is how the server tells a stuck worker from a busy
one). The library holds the GIL while it computes, which is why this runs in its own
process and not in the server's.

Frames go out on a private copy of stdout; fd 1 itself is pointed at stderr so that
nothing a native library prints can corrupt the protocol.
"""

from __future__ import annotations

import ctypes
import logging
import os
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from backends.onnx.batch import BatchEngine
from backends.onnx.decoder import Decoder, Unsupported, self_check
from backends.onnx.generation import Generation, GuideFailed
from backends.onnx.prefix_cache import PrefixCache
from backends.onnx.preparation import NotPrepared, Prepared, Preparation
from backends.onnx.processors import LogitsProcessor
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
from backends.onnx.providers import ProviderError, load_model
from backends.onnx.sampler import Sampler
from backends.onnx.sampling import processing_active
from backends.onnx.sequence import Sequence
from backends.onnx.vocab import load_token_bytes

log = logging.getLogger("dragoman.onnx.worker")
TRIM_AFTER = 1.0  # seconds idle before the heap's free memory is handed back

# A prompt chunk takes about this share of the time the round's decoding steps took
# (so other streams' gaps grow by about half while a long prompt is evaluated), or
# LONE_CHUNK_S when nothing else decodes.
PREFILL_SHARE = 0.5
LONE_CHUNK_S = 0.25


class Worker:
    """``model``: the library's model (Generator path), or None with ``engine``."""

    def __init__(
        self, og: Any, model: Any, model_dir: Path, out: BinaryIO, commands: queue.Queue[Any], preparation: Preparation,
        engine: BatchEngine | None = None,
    ) -> None:  # fmt: skip
        self.og = og
        self.model = model
        self.engine = engine
        self.out = out
        self.commands = commands
        self.preparation = preparation
        # Tokenizers need no loaded model: the engine path never loads the library's.
        self._tokenizer_source = model if model is not None else og.Config(str(model_dir))
        self.tokenizer = og.Tokenizer(self._tokenizer_source)
        preparation.tokenizer.library = self.tokenizer
        self._special_tokenizer: Any = None
        self.eos_ids = frozenset(int(i) for i in self.tokenizer.eos_token_ids)
        self.token_bytes = load_token_bytes(model_dir)
        self.window = _sliding_window(model_dir)
        self.active: dict[int, Generation] = {}  # started: prefilling or decoding
        self.pending: set[int] = set()  # being prepared
        self._seconds_per_prompt_token = 0.002  # learnt from each chunk

    def send(self, report: Report) -> None:
        self.out.write(encode_frame(report))

    def run(self) -> None:
        worked = False  # computed since the heap's free memory was last handed back
        trim_at: float | None = None
        while True:
            idle = not (self.engine.runnable if self.engine else any(g.runnable for g in self.active.values()))
            if idle and worked and trim_at is None and not self.active and not (self.engine and self.engine.active):
                # Handed back once idle a while, not between the requests of a burst
                # (which would fault the pages in again); a command that computes
                # nothing (a late credit, a ping) does not put it off.
                trim_at = time.monotonic() + TRIM_AFTER
            timeout = None if trim_at is None else max(0.0, trim_at - time.monotonic())
            items = self._drain(block=idle, timeout=timeout)
            if trim_at is not None and not items:
                _return_freed_memory()
                worked, trim_at = False, None
                continue
            for item in items:
                if isinstance(item, Shutdown):
                    return
                self._handle(item)
            if self._round():  # (a short request can start and end within one round)
                worked, trim_at = True, None
            self.out.flush()

    def _handle(self, item: Command | Prepared | NotPrepared) -> None:
        if isinstance(item, Start):
            self.pending.add(item.request_id)
            self.preparation.submit(item)
        elif isinstance(item, Cancel):
            self._cancel(item.request_id)
        elif isinstance(item, Credit):
            generation = self.active.get(item.request_id) or (self.engine and self.engine.find(item.request_id))
            if generation:
                generation.consumed = max(generation.consumed, item.consumed)
        elif isinstance(item, Ping):
            self.send(Pong(item.seq))
        elif isinstance(item, Prepared | NotPrepared):
            if item.start.request_id in self.pending:  # else cancelled meanwhile
                self.pending.discard(item.start.request_id)
                self._begin(item)

    def _drain(self, *, block: bool, timeout: float | None = None) -> list[Any]:
        """The commands waiting; with ``block``, at least one, or none after ``timeout``."""
        items = []
        if block:
            self.out.flush()
            try:
                items.append(self.commands.get(timeout=timeout))
            except queue.Empty:
                return items
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
        if self.engine is not None:
            self._begin_batch(self.engine, prepared, budget)
            return
        capacity = max(budget, min(self.window, prepared.context))
        try:
            generation = Generation(
                self.og, self.model, self._tokenizer_for(start), start, prepared.prompt_ids, budget, self.eos_ids,
                self.token_bytes, prepared.guide, capacity,
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

    def _begin_batch(self, engine: BatchEngine, prepared: Prepared, budget: int) -> None:
        start, prompt = prepared.start, prepared.prompt_ids
        decoder = engine.decoder
        try:
            sequence = Sequence(
                start, prompt, budget,
                sampler=Sampler(start.search, decoder.layout.search_defaults, decoder.vocab_size, prompt),
                processor=LogitsProcessor(start.processing) if processing_active(start.processing) else None,
                guide=prepared.guide, tokenizer=self._tokenizer_for(start), eos_ids=self.eos_ids,
                token_bytes=self.token_bytes,
            )  # fmt: skip
        except Exception as exc:  # one bad request must not take the model down
            log.exception("request %s could not start", start.request_id)
            self.send(Failed(start.request_id, f"could not start: {type(exc).__name__}: {exc}"))
            return
        self.send(Started(start.request_id, prompt_tokens=len(prompt), max_length=budget))
        if start.max_new_tokens == 0:
            self.send(sequence.done("length"))
            return
        engine.admit(sequence)

    def _round_batch(self, engine: BatchEngine) -> bool:
        if not engine.runnable:
            return False
        try:
            reports = engine.step()
        except Exception as exc:  # a forward pass failed: every sequence in it is lost
            log.exception("a batch step failed")
            for sequence in engine.reset():
                self.send(Failed(sequence.request_id, f"generation failed: {type(exc).__name__}: {exc}"))
            return True
        for _, report in reports:
            self.send(report)
        return True

    def _round(self) -> bool:
        """One round; whether it computed anything."""
        if self.engine is not None:
            return self._round_batch(self.engine)
        began = time.perf_counter()
        stepping = [g for g in self.active.values() if g.prefilled and g.runnable]
        for generation in stepping:
            self._step(generation)
        decoding = time.perf_counter() - began
        # The prompt with the fewest tokens left goes first: a short one (a stream's
        # next reply) never waits behind a long one being evaluated.
        waiting = min((g for g in self.active.values() if not g.prefilled), key=_prompt_left, default=None)
        if waiting is not None:
            # (Timed against what actually decoded: an empty round takes microseconds,
            # which made every lone prompt go one token a pass.)
            target = PREFILL_SHARE * decoding if stepping else LONE_CHUNK_S
            self._prefill(waiting, max(1, int(target / self._seconds_per_prompt_token)))
        return bool(stepping) or waiting is not None

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
        generation = self.active.pop(request_id, None) or (self.engine and self.engine.cancel(request_id))
        self.pending.discard(request_id)
        if generation:
            self.send(generation.done("cancelled"))
        else:  # finished already, being prepared, or never started: confirm anyway
            self.send(Done(request_id, "cancelled", prompt_tokens=0, completion_tokens=0))

    def _tokenizer_for(self, start: Start) -> Any:
        if not start.special_tokens:
            return self.tokenizer
        if self._special_tokenizer is None:
            self._special_tokenizer = self.og.Tokenizer(self._tokenizer_source)
            self._special_tokenizer.update_options(skip_special_tokens=False)
        return self._special_tokenizer


def _prompt_left(generation: Generation) -> int:
    return len(generation.prompt_ids) - generation.evaluated


def _model_context_length(model_dir: Path) -> int | None:
    try:
        config = msgspec.json.decode((model_dir / "genai_config.json").read_bytes())
        return int(config["model"]["context_length"])
    except (OSError, KeyError, TypeError, ValueError, msgspec.DecodeError):
        return None


def _load(config: WorkerConfig) -> tuple[Any, BatchEngine | None, str]:
    """(library model or None, batch engine or None, provider). A GPU provider, when
    one is a candidate and loads, gets the library's Generator; CPU gets the batch
    engine unless the model does not fit it (then the Generator, said in the log)."""
    path = Path(config.model_path)
    others = [p for p in config.providers if p != "cpu"]
    options = {"provider_options": config.provider_options, "threads": config.threads}
    if config.engine == "batch" and "cpu" not in config.providers:
        raise ProviderError(f"engine: batch runs on CPU only; the providers here are {', '.join(config.providers)}")
    if others and config.engine != "batch":
        try:
            model, provider = load_model(path, others, **options)  # type: ignore[arg-type]
            return model, None, provider
        except ProviderError:
            if "cpu" not in config.providers:
                raise
    if config.engine != "generator":
        try:
            decoder = Decoder(path, threads=config.threads, spin=config.spin)
            self_check(decoder)
            log.info("the batch engine's threads spin between ops: %s", decoder.spin_mode)
            cache = PrefixCache(config.prefix_cache_bytes, config.prefix_cache_entries)
            return None, BatchEngine(decoder, cache, decoder.layout.context_length), "cpu"
        except Unsupported as exc:
            if config.engine == "batch":
                raise
            log.warning("%s runs on the library's Generator (no batching, no prefix reuse): %s", path, exc)
    model, provider = load_model(path, ["cpu"], **options)  # type: ignore[arg-type]
    return model, None, provider


def _sliding_window(model_dir: Path) -> int:
    """The attention window of sliding-window layers (Gemma 2/3), 0 when none: the KV
    cache must be at least this long even for a short request."""
    try:
        config = msgspec.json.decode((model_dir / "genai_config.json").read_bytes())
        return int((config["model"]["decoder"].get("sliding_window") or {}).get("window_size") or 0)
    except (OSError, KeyError, TypeError, ValueError, AttributeError, msgspec.DecodeError):
        return 0


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

        model, engine, provider = _load(config)
        eos_ids = sorted(int(i) for i in og.Tokenizer(model if model is not None else og.Config(str(model_dir))).eos_token_ids)
        preparation = Preparation(
            model_dir, eos_ids, commands, context_length=_model_context_length(model_dir),
            grammar_timeout=config.grammar_timeout, grammar_memory=config.grammar_memory,
        )  # fmt: skip
        worker = Worker(og, model, model_dir, out, commands, preparation, engine)
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


def _return_freed_memory() -> None:
    """Hand the heap's free memory back to the system once the model is idle. glibc
    keeps what was freed for reuse: after eight 1,400-token prompts the idle process
    held 614 MiB, 515 after this (the prefix cache itself holds 251)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None).malloc_trim(0)
        except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
            pass


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

