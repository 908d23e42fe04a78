"""One request inside the batch engine: its prompt, where its KV stands, what it says.

The engine (:mod:`backends.onnx.worker.batch_engine`) owns the model passes; a :class:`Sequence`
turns each row of logits it is handed into the next token and the report the server
gets: grammar mask, logits processors, sampling, detokenising, stop strings, logprobs,
and the end (end-of-sequence, a stop string, a finished grammar, the length budget).
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
import numpy as np

from dragoman.backends.onnx.worker.grammar_mask import Guide
from dragoman.backends.onnx.worker.logits_processors import LogitsProcessor, log_softmax
from dragoman.backends.onnx.worker_protocol import RUN_AHEAD, Done, Progress, Start, Tokens
from dragoman.backends.onnx.worker.sampler import Sampler
from dragoman.backends.onnx.worker.token_text import TokenOutput, done_report
from dragoman.backends.text.stops import StopMatcher


class Sequence(TokenOutput):
    def __init__(
        self,
        start: Start,
        prompt: np.ndarray,
        budget: int,
        *,
        sampler: Sampler,
        processor: LogitsProcessor | None,
        guide: Guide | None,
        tokenizer: Any,
        eos_ids: frozenset[int],
        token_bytes: dict[int, bytes] | None,
    ) -> None:
        self.start = start
        self.budget = budget  # prompt + generated tokens at most
        self.ids = np.zeros(budget, dtype=np.int32)  # the prompt, then every token chosen
        self.ids[: len(prompt)] = prompt
        self.prompt_length = len(prompt)
        self.length = len(prompt)  # tokens in ``ids``
        self.computed = 0  # positions of this row whose KV is in the slab
        self.reused = 0  # of those, copied from the prefix cache
        self.row = -1
        self.sampler = sampler
        self.processor = processor
        self.guide = guide
        self.tokenizer = tokenizer
        self.eos_ids = eos_ids
        self.token_bytes = token_bytes
        self.stream = tokenizer.create_stream()
        self.stops = StopMatcher(start.stop)
        self.completion_tokens = 0
        self.prompt_eval_ns = 0
        self.eval_ns = 0
        self.consumed = 0  # tokens the consumer has taken (Credit)
        self.paused_passes = 0  # decode passes in a row it waited for its consumer
        self.warm = False  # a warm-up: a finished reply computed as a prompt, never reported

    def continuation(self) -> Sequence:
        """This sequence's prompt and reply as the prompt of a warm-up (see
        :mod:`backends.onnx.worker.batch_engine`); its id is negative, so no request's reports or
        commands ever reach it."""
        start = msgspec.structs.replace(self.start, request_id=-abs(self.request_id), stop=[])
        warm = Sequence(
            start, self.ids[: self.length], self.length + 1, sampler=self.sampler, processor=None, guide=None,
            tokenizer=self.tokenizer, eos_ids=self.eos_ids, token_bytes=None,
        )  # fmt: skip
        warm.warm = True
        return warm

    @property
    def prompt(self) -> np.ndarray:
        return self.ids[: self.prompt_length]

    @property
    def pending(self) -> int:
        """Prompt tokens still to prefill."""
        return self.prompt_length - self.computed

    @property
    def runnable(self) -> bool:
        """Not too far ahead of its consumer."""
        return self.completion_tokens - self.consumed < RUN_AHEAD

    @property
    def last_token(self) -> int:
        return int(self.ids[self.length - 1])

    def choose(self, logits: np.ndarray) -> tuple[Tokens, Done | None]:
        """The next token from this sequence's row of logits → (its report, the end or
        None). Every token is reported, text or not: the consumer's credit counts them."""
        began = time.perf_counter_ns()
        logprobs_row = log_softmax(logits) if self.start.logprobs else None
        row = logits
        blocked = None
        if self.guide is not None:
            row = logits.copy()
            self.guide.mask(row)
            blocked = np.isneginf(row)
            guided = row.copy()
        if self.processor is not None:
            row, _ = self.processor.process(row, self.ids[: self.length])
            if blocked is not None:
                row[blocked] = -np.inf
        token = self.sampler.choose(row)
        if blocked is not None and blocked[token]:
            # The knobs left no allowed token a chance (a zero or negative penalty turns
            # masked logits into NaN or +inf): the grammar's most likely token instead.
            token = int(np.argmax(guided))
        self.sampler.accept(token)
        self.ids[self.length] = token
        self.length += 1
        self.completion_tokens += 1
        tokens, ended = self.output(token, logprobs_row)
        self.eval_ns += time.perf_counter_ns() - began
        if ended:
            return tokens, self.done("stop")
        if self.length >= self.budget:
            return tokens, self.done("length")
        return tokens, None

    def progress(self) -> Progress:
        return Progress(self.request_id, self.prompt_length, self.reused, self.computed, self.prompt_eval_ns)

    def done(self, reason: str) -> Done:
        return done_report(
            self.request_id, reason, self.stops, prompt_tokens=self.prompt_length,
            completion_tokens=self.completion_tokens, prompt_eval_ns=self.prompt_eval_ns, eval_ns=self.eval_ns,
            cached_tokens=self.reused,
        )  # fmt: skip

