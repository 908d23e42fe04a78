"""Constrained decoding in the worker: llguidance's matcher masks the logits.

The library can constrain decoding itself (``GeneratorParams.set_guidance``), but then
the grammar is compiled inside ``og.Generator(...)`` on the step loop, by a build of
llguidance no process outside can bound (see :mod:`backends.onnx.worker.grammar_compile`), and
every guided Generator spent 0.19 s building llguidance's view of the vocabulary
(measured: 0.04 s without). Here the grammar is compiled once by the bounded checker,
then by :class:`Guide` on the worker's preparation thread (the library drops the GIL
while it builds), and the step loop only asks for each token's mask (microseconds).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dragoman.backends.onnx.worker.grammar_compile import GrammarRejected, error_text, limits
from dragoman.backends.onnx.worker_protocol import Guidance


def grammar_of(guidance: Guidance) -> str:
    """llguidance's grammar for a request's constraint."""
    import llguidance

    if guidance.kind == "json_schema":
        return llguidance.LLMatcher.grammar_from_json_schema(guidance.data)
    if guidance.kind == "regex":
        return llguidance.LLMatcher.grammar_from_regex(guidance.data)
    return llguidance.LLMatcher.grammar_from_lark(guidance.data)


class Guide:
    """One request's matcher: :meth:`mask` before each token, :meth:`consume` after."""

    def __init__(self, tokenizer: Any, grammar: str) -> None:
        import llguidance

        self.matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0, limits=limits())
        if self.matcher.is_error():
            raise GrammarRejected(error_text(self.matcher), too_complex=False)
        self._bits = np.zeros((tokenizer.vocab_size + 31) // 32, dtype=np.int32)
        self._size = tokenizer.vocab_size

    def mask(self, row: np.ndarray) -> None:
        """Sets every token the grammar does not allow next to -inf, in place."""
        self.matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        allowed = np.unpackbits(self._bits.view(np.uint8), bitorder="little")[: min(self._size, row.size)]
        row[: allowed.size][allowed == 0] = -np.inf
        row[allowed.size :] = -np.inf  # rows the model has beyond the tokenizer's vocabulary

    def consume(self, token: int) -> None:
        self.matcher.consume_token(token)

    @property
    def finished(self) -> bool:
        """The grammar admits nothing more: the reply is complete."""
        return self.matcher.is_stopped() and not self.matcher.is_error()

    @property
    def error(self) -> str:
        return error_text(self.matcher)
