"""One request's generation inside the worker: a Generator advanced a token at a time.

Runs in the worker process only (it drives ``onnxruntime_genai`` objects it is given;
it never imports the library itself, so it stays importable for tests). The prompt is
evaluated in chunks the worker sizes (:meth:`Generation.prefill`), so a long prompt
shares the step loop with the other requests instead of stopping it; each token is
reported, and a generation more than :data:`RUN_AHEAD` tokens ahead of its consumer
waits (:attr:`Generation.runnable`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from dragoman.backends.onnx.worker.grammar_mask import Guide
from dragoman.backends.onnx.worker.logits_processors import LogitsProcessor, log_softmax
from dragoman.backends.onnx.worker_protocol import RUN_AHEAD, Done, Search, Start, Tokens
from dragoman.backends.onnx.sampling_plan import processing_active
from dragoman.backends.onnx.worker.token_text import TokenOutput, done_report
from dragoman.backends.text.stops import StopMatcher


class Generation(TokenOutput):
    """Created with the prompt already tokenized (and its grammar compiled);
    :meth:`prefill` until :attr:`prefilled`, then :meth:`step` until it returns a
    :class:`Done`."""

    def __init__(
        self,
        generator: Any,
        tokenizer: Any,
        start: Start,
        prompt_ids: np.ndarray,
        max_length: int,
        eos_ids: frozenset[int],
        token_bytes: dict[int, bytes] | None,
        capacity: int,
        guide: Guide | None = None,
        reused: int = 0,
    ) -> None:
        """``generator``: new, or kept and rewound to the first ``reused`` prompt tokens;
        ``capacity``: its max_length (``max_length`` is this request's)."""
        self.start = start
        self.prompt_ids = prompt_ids
        self.max_length = max_length
        self.eos_ids = eos_ids
        self.token_bytes = token_bytes
        self.tokenizer = tokenizer
        self.generator = generator
        self.capacity = capacity
        self.guide = guide
        self.stream = tokenizer.create_stream()
        self.stops = StopMatcher(start.stop)
        self.processor = LogitsProcessor(start.processing) if processing_active(start.processing) else None
        self.completion_tokens = 0
        self.prompt_eval_ns = 0
        self.eval_ns = 0
        self.reused = reused  # prompt tokens whose KV the kept generator had
        self.evaluated = reused  # prompt tokens appended so far
        self.consumed = 0  # tokens the consumer has taken (Credit)

    @property
    def prefilled(self) -> bool:
        return self.evaluated >= len(self.prompt_ids)

    @property
    def runnable(self) -> bool:
        """Not too far ahead of its consumer (prefilling always may go on)."""
        return not self.prefilled or self.completion_tokens - self.consumed < RUN_AHEAD

    def prefill(self, tokens: int) -> int:
        """Evaluates up to ``tokens`` more prompt tokens; how many it did. A pass of one
        token computes the KV differently in the last bits (the decode path), so no chunk
        is shorter than two tokens and none leaves one behind: the prompt's KV, and the
        greedy answer, are then those of one pass over the whole prompt."""
        remaining = len(self.prompt_ids) - self.evaluated
        size = min(remaining, max(2, tokens))
        if remaining - size == 1:
            size = remaining
        chunk = self.prompt_ids[self.evaluated : self.evaluated + size]
        began = time.perf_counter_ns()
        self.generator.append_tokens(chunk)
        self.prompt_eval_ns += time.perf_counter_ns() - began
        self.evaluated += len(chunk)
        return len(chunk)

    def step(self) -> tuple[Tokens, Done | None]:
        """Advance one token → (its report, Done or None)."""
        began = time.perf_counter_ns()
        logprobs_row = self._prepare_logits()
        self.generator.generate_next_token()
        token = int(self.generator.get_next_tokens()[0])
        self.completion_tokens += 1
        tokens, ended = self.output(token, logprobs_row)
        self.eval_ns += time.perf_counter_ns() - began
        if ended:
            return tokens, self.done("stop")
        if self.generator.is_done() or len(self.prompt_ids) + self.completion_tokens >= self.max_length:
            return tokens, self.done("length")
        return tokens, None

    def done(self, reason: str) -> Done:
        return done_report(
            self.request_id, reason, self.stops, prompt_tokens=len(self.prompt_ids),
            completion_tokens=self.completion_tokens, prompt_eval_ns=self.prompt_eval_ns, eval_ns=self.eval_ns,
            cached_tokens=self.reused,
        )  # fmt: skip

    def _prepare_logits(self) -> np.ndarray | None:
        """Masks and processes the logits; returns the log-softmax row (of the
        model's own logits) when logprobs are asked."""
        if self.processor is None and self.guide is None and not self.start.logprobs:
            return None
        logits = self.generator.get_logits()
        row = np.array(logits, dtype=np.float32).reshape(-1)
        row_logprobs = log_softmax(row) if self.start.logprobs else None
        if self.guide is None and self.processor is None:
            return row_logprobs
        if self.guide is not None:
            self.guide.mask(row)
        if self.processor is not None:
            row, _ = self.processor.process(row, self.generator.get_sequence(0))
        self.generator.set_logits(np.ascontiguousarray(row, dtype=np.float32).reshape(np.shape(logits)))
        return row_logprobs


def new_generator(og: Any, model: Any, search: Search, capacity: int) -> Any:
    """A Generator of ``capacity`` positions sampling with ``search``. The KV cache may
    need to be longer than the request (a sliding-window layer refuses a cache shorter
    than its window; a kept Generator serves later, longer requests); the request still
    ends at its own max_length."""
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=capacity, **search_options(search))
    return og.Generator(model, params)


def search_options(search: Search) -> dict[str, Any]:
    """Every set field, ``do_sample`` always (a model's genai_config may default to True)."""
    fields = {f: getattr(search, f) for f in search.__struct_fields__}
    return {k: v for k, v in fields.items() if v is not None}
