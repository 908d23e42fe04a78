"""What the server gets for a chosen token (its report: text, logprob entry) and at the end.

Both ways of generating (:class:`~backends.onnx.worker.generator_path.Generation`, the library's
Generator; :class:`~backends.onnx.worker.sequence.Sequence`, the batch engine) choose their
tokens differently and report them here (:class:`TokenOutput`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from dragoman.adapters.canonical import TokenLogprob, TopLogprob
from dragoman.backends.onnx.worker_protocol import Done, Start, Tokens
from dragoman.backends.text.stops import StopMatcher

if TYPE_CHECKING:
    from dragoman.backends.onnx.worker.grammar_mask import Guide


class GuideFailed(Exception):
    """The request's grammar could not go on (a parser limit reached mid-reply)."""


class TokenOutput:
    """What a chosen token becomes: the grammar takes it, its text goes through the
    stop strings, its logprob entry is made when asked, and it may end the generation
    (end of sequence, a stop string, the grammar's end). Every token is reported, text
    or not: the consumer's credit counts them."""

    start: Start
    guide: Guide | None
    stream: Any  # the tokenizer's detokenising stream
    stops: StopMatcher
    eos_ids: frozenset[int]
    token_bytes: dict[int, bytes] | None
    tokenizer: Any

    @property
    def request_id(self) -> int:
        return self.start.request_id

    def output(self, token: int, logprobs_row: np.ndarray | None) -> tuple[Tokens, bool]:
        """(``token``'s report, whether it ends the generation); ``logprobs_row``: the
        log-softmax of the model's own logits when logprobs are asked."""
        is_eos = token in self.eos_ids
        if self.guide is not None and not is_eos:
            self.guide.consume(token)
            if self.guide.error:
                raise GuideFailed(f"the output constraint could not go on: {self.guide.error}")
        text = self.stops.feed("" if is_eos else self.stream.decode(token))
        logprobs = None
        if logprobs_row is not None and not is_eos:
            logprobs = [token_logprob(token, logprobs_row, self.start.top_logprobs, self.token_bytes, self.tokenizer)]
        ended = self.stops.stopped or is_eos or (self.guide is not None and self.guide.finished)
        return Tokens(self.request_id, [token], text, logprobs), ended


def spell(token: int, token_bytes: dict[int, bytes] | None, tokenizer: Any) -> tuple[str, list[int]]:
    """The token's text and raw bytes (a token may hold part of a UTF-8 character)."""
    raw = token_bytes.get(token) if token_bytes else None
    if raw is None:
        text = tokenizer.decode(np.array([token], dtype=np.int32))
        return text, list(text.encode())
    return raw.decode("utf-8", errors="replace"), list(raw)


def token_logprob(token: int, row: np.ndarray, top: int, token_bytes: dict[int, bytes] | None,
                  tokenizer: Any) -> TokenLogprob:  # fmt: skip
    """``row``: log-softmax of the raw logits; ``top``: how many alternatives to list."""
    alternatives: list[TopLogprob] = []
    if top > 0:
        best = np.argpartition(-row, top)[:top]
        best = best[np.argsort(-row[best])]
        for i in best:
            spelled, raw_bytes = spell(int(i), token_bytes, tokenizer)
            alternatives.append(TopLogprob(token=spelled, logprob=float(row[i]), bytes=raw_bytes))
    text, raw = spell(token, token_bytes, tokenizer)
    return TokenLogprob(token=text, logprob=float(row[token]), bytes=raw, top_logprobs=alternatives)


def done_report(request_id: int, reason: str, stops: StopMatcher, *, prompt_tokens: int, completion_tokens: int,
                prompt_eval_ns: int, eval_ns: int, cached_tokens: int = 0) -> Done:  # fmt: skip
    """The end of a generation; the text a stop string held back is released unless it
    was cancelled."""
    return Done(
        request_id,
        reason,  # type: ignore[arg-type]
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        prompt_eval_ns=prompt_eval_ns,
        eval_ns=eval_ns,
        text=stops.flush() if reason != "cancelled" else "",
        stop_sequence=stops.matched,
        cached_tokens=cached_tokens,
    )
