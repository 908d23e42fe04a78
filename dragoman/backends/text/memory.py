"""Ollama's token memory (``/api/generate``'s ``context``) on a local model: the ids a
client sends back are checked and bounded here, before any model reads them: ids
outside the vocabulary, or more of them than the context holds, are refused naming
``context``. Each local backend prepends them its own way (onnx: decoded to text;
ctransformers: as ids).
"""

from __future__ import annotations

from dragoman.adapters.errors import ContextTooLong, RequestError


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
