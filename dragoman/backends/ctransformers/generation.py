"""One reply, generated on a worker thread with one ctransformers model instance.

The library's C calls release the GIL (it loads with ``ctypes.CDLL``), so the event
loop runs on while a thread evaluates; measured: event-loop ticks stayed within 5 ms
of schedule during a 1.7 s prompt evaluation. The loop here is the library's
``generate`` taken apart, so that it can check for cancellation before each token,
stop on any end-of-turn token, apply the logit edits of
:mod:`backends.ctransformers.sampling` and never run past the context (past it the
library silently overwrites the last position).
"""

from __future__ import annotations

import codecs
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

import msgspec
import numpy as np

from dragoman.backends.ctransformers.sampling import SamplePlan, edit_logits, sample_arguments
from dragoman.backends.text.stops import StopMatcher

# Prompt tokens evaluated between two checks for cancellation.
PROMPT_CHUNK = 64
# The bundled llama.cpp crashes the process (SIGSEGV) tokenising one run of about
# 32,000 characters without whitespace (measured: 28,000 fine, 32,768 not), so longer
# runs are tokenised in pieces of this many characters (only such runs tokenise
# differently, at the cuts).
MAX_RUN = 4096
_LONG_RUN = re.compile(r"\S{%d,}" % (MAX_RUN + 1))


Reason = Literal["stop", "length", "cancelled"]


class Outcome(msgspec.Struct, frozen=True):
    reason: Reason
    prompt_tokens: int
    completion_tokens: int
    prompt_eval_ns: int = 0
    eval_ns: int = 0
    stop_sequence: str | None = None  # the stop string that ended it, if one did


class Job(msgspec.Struct, frozen=True):
    prompt_tokens: list[int]
    plan: SamplePlan
    context_limit: int
    end_tokens: frozenset[int] = frozenset()
    batch_size: int = 8
    threads: int = -1


def tokenize(llm: Any, pieces: Sequence[str | int], *, add_bos: bool) -> list[int]:
    """Token ids of a prompt split by :func:`backends.ctransformers.prompt.split_special`:
    text pieces through the library's tokenizer, special tokens as they are."""
    tokens: list[int] = []
    if add_bos and not (pieces and pieces[0] == llm.bos_token_id):
        tokens.append(llm.bos_token_id)
    for piece in pieces:
        if isinstance(piece, int):
            tokens.append(piece)
        else:
            for text in bounded_runs(piece):
                tokens.extend(llm.tokenize(text, add_bos_token=False))
    return tokens


def bounded_runs(text: str) -> list[str]:
    """``text`` cut so that no piece holds a run of more than :data:`MAX_RUN`
    characters without whitespace."""
    pieces: list[str] = []
    position = 0
    for match in _LONG_RUN.finditer(text):
        for cut in range(match.start() + MAX_RUN, match.end(), MAX_RUN):
            pieces.append(text[position:cut])
            position = cut
    pieces.append(text[position:])
    return [p for p in pieces if p]


def run(llm: Any, job: Job, emit: Callable[[str, int], None], cancel: threading.Event) -> Outcome:
    """Generate until an end token, a stop string, the token limit, the end of the
    context or ``cancel``; ``emit`` receives the text as it becomes final and the
    number of tokens generated so far."""
    began = time.perf_counter_ns()
    prompt = job.prompt_tokens
    # Reuses the cached keys/values of the longest prefix this instance evaluated last.
    pending = llm.prepare_inputs_for_generation(prompt, reset=True)
    for start in range(0, len(pending), PROMPT_CHUNK):
        if cancel.is_set():
            return Outcome("cancelled", len(prompt), 0, time.perf_counter_ns() - began)
        llm.eval(pending[start : start + PROMPT_CHUNK], batch_size=job.batch_size, threads=job.threads)
    prompt_eval_ns = time.perf_counter_ns() - began
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    stops = StopMatcher(list(job.plan.stop))
    generated = 0
    reason: Reason = "stop"
    limit = job.plan.max_new_tokens
    while True:
        if cancel.is_set():
            reason = "cancelled"
            break
        if (limit is not None and generated >= limit) or len(llm._context) >= job.context_limit:
            reason = "length"
            break
        token = _next_token(llm, job.plan, generated)
        if token in job.end_tokens or llm.is_eos_token(token):
            break
        llm.eval([token], batch_size=job.batch_size, threads=job.threads)
        generated += 1
        text = stops.feed(decoder.decode(llm.detokenize([token], decode=False)))
        if text:
            emit(text, generated)
        if stops.stopped:
            break
    if reason != "cancelled":
        tail = stops.feed(decoder.decode(b"", final=True)) + stops.flush()
        if tail:
            emit(tail, generated)
    eval_ns = time.perf_counter_ns() - began - prompt_eval_ns
    return Outcome(reason, len(prompt), generated, prompt_eval_ns, eval_ns, stop_sequence=stops.matched)


def _next_token(llm: Any, plan: SamplePlan, step: int) -> int:
    if plan.edits_logits:
        edit_logits(_logits_row(llm), plan, llm._context)
    return llm.sample(**sample_arguments(plan, llm.vocab_size, step))


def _logits_row(llm: Any) -> np.ndarray:
    """The library's logits buffer, as a writable view: its sampler reads the last
    ``vocab_size`` values, the row of the last evaluated token."""
    size = llm.ctransformers_llm_logits_size()
    buffer = np.ctypeslib.as_array(llm.ctransformers_llm_logits_data(), shape=(size,))
    return buffer[size - llm.vocab_size :]
