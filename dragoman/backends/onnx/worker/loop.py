"""The worker's loop: every active request of one loaded model, interleaved.

On CPU the batch engine (:mod:`backends.onnx.worker.batch_engine`) runs the rounds: one forward pass
advances every generation, a long prompt is prefilled in chunks between them, and the
KV of recent prompts is reused. Elsewhere (CUDA, DirectML, ``engine: generator``, or a
model the engine cannot run) each request has a library Generator, as described here,
kept when it ends for the next request that starts the same way
(:mod:`backends.onnx.worker.generator_cache`).

The commands (from the reader thread of :mod:`backends.onnx.worker.process`) and the results of
the preparation thread (:mod:`backends.onnx.worker.request_preparation`: prompts tokenised, grammars
compiled) arrive on one queue. The loop drains that queue between rounds and, each
round, advances every generation that is not too far ahead of its consumer by one
token, and evaluates one chunk of at most one waiting prompt (the one with the fewest
tokens left). A round stays short whatever a request asks, so a new, cancelled or
credited request takes effect within a token, and a Ping is answered within a round
(which is how the server tells a stuck worker from a busy one). Once the model has
been idle a while the heap goes back to the system (:mod:`backends.onnx.worker.heap_trim`).
"""

from __future__ import annotations

import logging
import queue
import time
from pathlib import Path
from typing import Any, BinaryIO

from dragoman.backends.onnx.worker.batch_engine import BatchEngine
from dragoman.backends.onnx.worker.generator_path import Generation, new_generator
from dragoman.backends.onnx.worker.generator_cache import GeneratorCache, capacity_for
from dragoman.backends.onnx.worker.heap_trim import IdleTrim
from dragoman.backends.onnx.worker.loading import sliding_window
from dragoman.backends.onnx.worker.request_preparation import NotPrepared, Prepared, Preparation
from dragoman.backends.onnx.worker.logits_processors import LogitsProcessor
from dragoman.backends.onnx.worker_protocol import Cancel, Command, Credit, Done, Failed, Ping, Pong, Progress, Report, Shutdown, Start, Started, encode_frame
from dragoman.backends.onnx.worker.sampler import Sampler
from dragoman.backends.onnx.sampling_plan import processing_active
from dragoman.backends.onnx.worker.sequence import Sequence
from dragoman.backends.onnx.worker.token_text import GuideFailed
from dragoman.backends.onnx.vocab import load_token_bytes

log = logging.getLogger("dragoman.onnx.worker")

# A prompt chunk takes about this share of the time the round's decoding steps took
# (so other streams' gaps grow by about half while a long prompt is evaluated), or
# LONE_CHUNK_S when nothing else decodes, and then never fewer than LONE_MIN_TOKENS: a
# pass has a fixed cost the per-token estimate takes in, so a busy machine's estimate
# split a lone 54-token prompt in two, and its first token came a pass later than the
# library's own loop gives it (split 40 + 14 on a busy 2-core machine: +180 ms).
PREFILL_SHARE = 0.5
LONE_CHUNK_S = 0.25
LONE_MIN_TOKENS = 256


class Worker:
    """``model``: the library's model (Generator path), or None with ``engine``;
    ``kept``: the Generators kept for reuse (Generator path)."""

    def __init__(
        self, og: Any, model: Any, model_dir: Path, out: BinaryIO, commands: queue.Queue[Any], preparation: Preparation,
        engine: BatchEngine | None = None, kept: GeneratorCache | None = None,
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
        self.window = sliding_window(model_dir)
        self.kept = kept if engine is None else None
        self.active: dict[int, Generation] = {}  # started: prefilling or decoding
        self.pending: set[int] = set()  # being prepared
        self._seconds_per_prompt_token = 0.002  # learnt from each chunk

    def send(self, report: Report) -> None:
        self.out.write(encode_frame(report))

    def _started(self, started: Started) -> None:
        """Sent at once, not with the round's other reports: the server turns it into
        the reply's first event while the prompt is evaluated, instead of between the
        prompt and the first token (3-4 ms of a busy machine's time to first token)."""
        self.send(started)
        self.out.flush()

    def run(self) -> None:
        trim = IdleTrim()
        while True:
            runnable = self.engine.runnable if self.engine else any(g.runnable for g in self.active.values())
            holding = runnable or bool(self.active or self.pending) or bool(self.engine and self.engine.active)
            items = self._drain(block=not runnable, timeout=trim.timeout(holding=holding))
            if trim.handed_back(items):
                continue
            for item in items:
                if isinstance(item, Shutdown):
                    return
                self._handle(item)
            if self._round():  # (a short request can start and end within one round)
                trim.computed()
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
        try:
            generation = self._generation(prepared, budget)
        except Exception as exc:  # one bad request must not take the model down
            log.exception("request %s could not start", rid)
            self.send(Failed(rid, f"could not start: {type(exc).__name__}: {exc}"))
            return
        self._started(Started(rid, prompt_tokens=n, max_length=budget))
        if start.max_new_tokens == 0:
            self._finish(generation, generation.done("length"))
            return
        self.active[rid] = generation

    def _generation(self, prepared: Prepared, budget: int) -> Generation:
        """A Generation on a kept Generator rewound to the prefix it shares, else a new one."""
        start, prompt = prepared.start, prepared.prompt_ids
        cache = self.kept if self.kept is not None and self.kept.enabled else None
        if cache is not None:
            capacity = capacity_for(budget, prepared.context, self.window)
        else:
            capacity = max(budget, min(self.window, prepared.context))
        kept, shared = cache.take(prompt, start.search, budget, capacity) if cache is not None else (None, 0)
        if kept is not None:
            try:
                kept.generator.rewind_to(shared)
                generator, capacity = kept.generator, kept.capacity
            except Exception:  # (a sliding window that has moved on cannot go back): start anew
                log.exception("a kept generator could not be rewound to %d tokens", shared)
                kept, shared = None, 0
        if kept is None:
            generator = new_generator(self.og, self.model, start.search, capacity)
        return Generation(
            generator, self._tokenizer_for(start), start, prompt, budget, self.eos_ids, self.token_bytes, capacity,
            prepared.guide, reused=shared,
        )  # fmt: skip

    def _finish(self, generation: Generation, done: Done) -> None:
        """Report ``done`` and keep the generator for the next request."""
        self.active.pop(generation.request_id, None)
        self.send(done)
        if self.kept is not None:
            self.out.flush()  # (the client has its answer before the generator is measured)
            self.kept.keep(generation.generator, generation.prompt_ids[: generation.evaluated], generation.start.search,
                           generation.capacity)  # fmt: skip

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
        self._started(Started(start.request_id, prompt_tokens=len(prompt), max_length=budget))
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
            tokens = int(target / self._seconds_per_prompt_token)
            self._prefill(waiting, max(1, tokens) if stepping else max(LONE_MIN_TOKENS, tokens))
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
        if generation.start.progress:
            self.send(Progress(generation.request_id, len(generation.prompt_ids), generation.reused,
                               generation.evaluated, generation.prompt_eval_ns))  # fmt: skip
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
            self._finish(generation, done)

    def _cancel(self, request_id: int) -> None:
        generation = self.active.get(request_id)
        if generation is not None:
            self._finish(generation, generation.done("cancelled"))
            return
        sequence = self.engine.cancel(request_id) if self.engine else None
        self.pending.discard(request_id)
        if sequence:
            self.send(sequence.done("cancelled"))
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
