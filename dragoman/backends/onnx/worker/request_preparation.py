"""Everything a request needs before its Generator, done off the step loop.

One thread tokenises prompts (``tokenizers`` lets go of the GIL) and checks that they
fit the context; a second compiles the grammars of the requests that have one (bounded
by :class:`~backends.onnx.worker.grammar_compile.GrammarCheck`, then built by llguidance, which
lets go of the GIL too), so a grammar that takes its full time limit holds up no
request without one. Meanwhile the worker's step loop goes on with every other
request. Results go onto the worker's command queue, where the loop picks them up
between rounds; a request cancelled meanwhile is dropped there.
"""

from __future__ import annotations

import logging
import queue
import threading
from pathlib import Path
from typing import Any, Literal

import msgspec
import numpy as np

from dragoman.backends.onnx.worker.grammar_compile import GrammarCheck, GrammarRejected
from dragoman.backends.onnx.worker.grammar_mask import Guide, grammar_of
from dragoman.backends.onnx.prompt_tokens import PromptTokenizer
from dragoman.backends.onnx.worker_protocol import Refused, Start

log = logging.getLogger("dragoman.onnx.worker")


class Prepared(msgspec.Struct):
    start: Start
    prompt_ids: np.ndarray
    context: int  # the context length this request may use
    guide: Guide | None = None


class NotPrepared(msgspec.Struct):
    """The request cannot start: refused (a client's error) or failed."""

    start: Start
    refusal: Refused | None = None
    failure: str | None = None


class Preparation:
    def __init__(
        self, model_dir: Path, eos_ids: list[int], results: queue.Queue[Any], *, context_length: int | None,
        grammar_timeout: float, grammar_memory: int,
    ) -> None:  # fmt: skip
        self.model_dir = model_dir
        self.results = results
        self.context_length = context_length
        self.tokenizer = PromptTokenizer(model_dir, None)
        self._eos = eos_ids
        self._checker = GrammarCheck(
            model_dir / "tokenizer.json", eos_ids, timeout=grammar_timeout, memory=grammar_memory
        )
        self._grammar_tokenizer: Any = None
        self._jobs: queue.Queue[Start | None] = queue.Queue()
        self._grammars: queue.Queue[Prepared | None] = queue.Queue()
        self._threads = [
            threading.Thread(target=self._run, args=(self._jobs, self._tokenize), daemon=True, name="prepare"),
            threading.Thread(target=self._run, args=(self._grammars, self._compile), daemon=True, name="grammars"),
        ]

    def begin(self) -> None:
        for thread in self._threads:
            thread.start()

    def submit(self, start: Start) -> None:
        self._jobs.put(start)

    def close(self) -> None:
        self._jobs.put(None)
        self._grammars.put(None)
        self._checker.close()

    def _run(self, jobs: queue.Queue[Any], work: Any) -> None:
        while (job := jobs.get()) is not None:
            start = job if isinstance(job, Start) else job.start
            try:
                outcome = work(job)
            except Exception as exc:  # one request's bug must not stop the thread
                log.exception("request %s could not be prepared", start.request_id)
                outcome = NotPrepared(start, failure=f"could not start: {type(exc).__name__}: {exc}")
            if outcome is not None:
                self.results.put(outcome)

    def _tokenize(self, start: Start) -> Prepared | NotPrepared | None:
        """None: handed on to the grammar thread."""
        rid = start.request_id
        prompt_ids = self.tokenizer.encode(start.prompt)
        n = len(prompt_ids)
        context = min(start.context_length, self.context_length) if self.context_length else start.context_length
        if n == 0:  # nothing to evaluate (a template that renders nothing): the model cannot start
            message = "the prompt is empty: it has no tokens for the model to continue"
            return NotPrepared(start, Refused(rid, "empty", message, context_length=context))
        if n >= context:
            message = f"the prompt is {n} tokens, which does not fit the context length of {context} tokens"
            return NotPrepared(start, Refused(rid, "context", message, prompt_tokens=n, context_length=context))
        if start.guidance is None:
            return Prepared(start, prompt_ids, context)
        self._grammars.put(Prepared(start, prompt_ids, context))
        return None

    def _compile(self, prepared: Prepared) -> Prepared | NotPrepared:
        start, n, context = prepared.start, len(prepared.prompt_ids), prepared.context
        rid = start.request_id
        assert start.guidance is not None
        try:
            grammar = grammar_of(start.guidance)
            self._checker.check(grammar)
            guide = Guide(self._tokenizer(), grammar)
        except GrammarRejected as exc:
            kind: Literal["too_complex", "invalid"] = "too_complex" if exc.too_complex else "invalid"
            prefix = "" if exc.too_complex else "invalid constraint: "
            return NotPrepared(start, Refused(rid, kind, f"{prefix}{exc}", prompt_tokens=n, context_length=context))
        except ValueError as exc:  # a schema llguidance cannot even read
            return NotPrepared(start, Refused(rid, "invalid", f"invalid constraint: {exc}", prompt_tokens=n))
        prepared.guide = guide
        return prepared

    def _tokenizer(self) -> Any:
        if self._grammar_tokenizer is None:
            import llguidance

            raw = (self.model_dir / "tokenizer.json").read_text(encoding="utf-8")
            self._grammar_tokenizer = llguidance.LLTokenizer(raw, eos_token=self._eos or None)
        return self._grammar_tokenizer
