"""Ollama's token memory (``/api/generate``'s ``context``) on a local model.

As Ollama does it: the ids an earlier reply gave back are decoded with the model's own
tokenizer and the text prepends the rendered prompt; a reply gives back the ids of its
whole prompt and its text, tokenised again. Both are checked and bounded here, before
any decoding: ids outside the vocabulary, or more of them than the context holds, are
refused naming ``context``.
"""

from __future__ import annotations

import msgspec

from dragoman.adapters.errors import ContextTooLong, RequestError
from dragoman.backends.onnx.prompt_tokens import PromptTokenizer
from dragoman.backends.onnx.protocol import Start
from dragoman.backends.text.segments import Segment


def check_context(ids: list[int], *, vocab_size: int, context_length: int) -> None:
    """Refuses ids the model cannot have written, or more than its context holds."""
    if len(ids) >= context_length:
        raise ContextTooLong(
            f"context holds {len(ids)} token ids; the model's context is {context_length} tokens, "
            "and they must leave room for the prompt; start a new conversation (send no context)",
            param="context",
            prompt_tokens=len(ids),
            context_length=context_length,
        )
    bad = next((i for i, t in enumerate(ids) if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise RequestError(
            f"context[{bad}]: {ids[bad]} is not a token id of this model (0 to {vocab_size - 1}); "
            "send back the context a reply of the same model gave",
            param="context",
        )


def with_memory(start: Start, ids: list[int], tokenizer: PromptTokenizer) -> Start:
    """``start`` with the text of ``ids`` before its prompt (special tokens special)."""
    check_context(ids, vocab_size=tokenizer.vocab_size, context_length=start.context_length)
    return msgspec.structs.replace(start, prompt=[Segment(tokenizer.decode(ids), special=True), *start.prompt])


def context_ids(tokenizer: PromptTokenizer, prompt: list[Segment], reply: str) -> list[int]:
    """The ids of the prompt and the reply, as Ollama gives them back: tokenised again."""
    return [int(t) for t in tokenizer.encode([*prompt, Segment(reply, special=True)])]
