"""One request's generation inside the worker: a Generator advanced a token at a time.

Runs in the worker process only (it drives ``onnxruntime_genai`` objects it is given;
it never imports the library itself, so it stays importable for tests).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from adapters.canonical import TokenLogprob, TopLogprob
from backends.onnx.processors import LogitsProcessor, log_softmax
from backends.onnx.protocol import Done, Search, Start, Tokens
from backends.onnx.sampling import processing_active
from backends.text.stops import StopMatcher


class Generation:
    """Created with the prompt already tokenized; :meth:`prefill` then :meth:`step`
    until it returns a :class:`Done`."""

    def __init__(
        self,
        og: Any,
        model: Any,
        tokenizer: Any,
        start: Start,
        prompt_ids: np.ndarray,
        max_length: int,
        eos_ids: frozenset[int],
        token_bytes: dict[int, bytes] | None,
    ) -> None:
        self.start = start
        self.prompt_ids = prompt_ids
        self.max_length = max_length
        self.eos_ids = eos_ids
        self.token_bytes = token_bytes
        self.tokenizer = tokenizer
        params = og.GeneratorParams(model)
        options = search_options(start.search)
        params.set_search_options(max_length=max_length, **options)
        if start.guidance is not None:
            params.set_guidance(start.guidance.kind, start.guidance.data)
        # Creating the generator compiles the grammar: a bad schema raises here.
        self.generator = og.Generator(model, params)
        self.stream = tokenizer.create_stream()
        self.stops = StopMatcher(start.stop)
        self.processor = LogitsProcessor(start.processing) if processing_active(start.processing) else None
        self.completion_tokens = 0
        self.prompt_eval_ns = 0
        self.eval_ns = 0

    @property
    def request_id(self) -> int:
        return self.start.request_id

    def prefill(self) -> None:
        began = time.perf_counter_ns()
        self.generator.append_tokens(self.prompt_ids)
        self.prompt_eval_ns = time.perf_counter_ns() - began

    def step(self) -> tuple[Tokens | None, Done | None]:
        """Advance one token → (its report or None when all held back, Done or None)."""
        began = time.perf_counter_ns()
        logprobs_row = self._prepare_logits()
        self.generator.generate_next_token()
        token = int(self.generator.get_next_tokens()[0])
        self.completion_tokens += 1
        is_eos = token in self.eos_ids
        delta = "" if is_eos else self.stream.decode(token)
        text = self.stops.feed(delta)
        logprobs = None
        if logprobs_row is not None and not is_eos:
            logprobs = [self._token_logprob(token, logprobs_row)]
        self.eval_ns += time.perf_counter_ns() - began
        tokens = Tokens(self.request_id, [token], text, logprobs) if (text or logprobs) else None
        if self.stops.stopped or is_eos:
            return tokens, self.done("stop")
        if self.generator.is_done():
            return tokens, self.done("length")
        return tokens, None

    def done(self, reason: str) -> Done:
        tail = self.stops.flush() if reason != "cancelled" else ""
        return Done(
            self.request_id,
            reason,  # type: ignore[arg-type]
            prompt_tokens=len(self.prompt_ids),
            completion_tokens=self.completion_tokens,
            prompt_eval_ns=self.prompt_eval_ns,
            eval_ns=self.eval_ns,
            text=tail,
        )

    def _prepare_logits(self) -> np.ndarray | None:
        """Runs the processors; returns the log-softmax row when logprobs are asked."""
        if self.processor is None and not self.start.logprobs:
            return None
        logits = self.generator.get_logits()
        row = np.asarray(logits, dtype=np.float32).reshape(-1)
        row_logprobs = log_softmax(row) if self.start.logprobs else None
        if self.processor is not None:
            sequence = self.generator.get_sequence(0)
            processed, _ = self.processor.process(row, sequence)
            self.generator.set_logits(processed.reshape(np.shape(logits)).astype(np.float32))
        return row_logprobs

    def _token_logprob(self, token: int, row: np.ndarray) -> TokenLogprob:
        top: list[TopLogprob] = []
        k = self.start.top_logprobs
        if k > 0:
            best = np.argpartition(-row, k)[:k]
            best = best[np.argsort(-row[best])]
            for i in best:
                spelled, raw_bytes = self._spell(int(i))
                top.append(TopLogprob(token=spelled, logprob=float(row[i]), bytes=raw_bytes))
        text, raw = self._spell(token)
        return TokenLogprob(token=text, logprob=float(row[token]), bytes=raw, top_logprobs=top)

    def _spell(self, token: int) -> tuple[str, list[int]]:
        raw = self.token_bytes.get(token) if self.token_bytes else None
        if raw is None:
            text = self.tokenizer.decode(np.array([token], dtype=np.int32))
            return text, list(text.encode())
        return raw.decode("utf-8", errors="replace"), list(raw)


def search_options(search: Search) -> dict[str, Any]:
    """Every set field, ``do_sample`` always (a model's genai_config may default to True)."""
    fields = {f: getattr(search, f) for f in search.__struct_fields__}
    return {k: v for k, v in fields.items() if v is not None}
