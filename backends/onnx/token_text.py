"""What the server gets for a chosen token (its spelling, its logprob entry) and at the end."""

from __future__ import annotations

from typing import Any

import numpy as np

from adapters.canonical import TokenLogprob, TopLogprob
from backends.onnx.protocol import Done
from backends.text.stops import StopMatcher


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
