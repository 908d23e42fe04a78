"""Ollama's token memory (``/api/generate``'s ``context``) on a local model.

As Ollama does it: the ids an earlier reply gave back are decoded with the model's own
tokenizer and the text prepends the rendered prompt; a reply gives back the ids of its
whole prompt and its text, tokenised again. Both are checked and bounded here, before
any decoding: ids outside the vocabulary, or more of them than the context holds, are
refused naming ``context``.
"""

from __future__ import annotations

import msgspec

from dragoman.backends.onnx.prompt_tokens import PromptTokenizer
from dragoman.backends.onnx.worker_protocol import Start
from dragoman.backends.text.memory import check_context
from dragoman.backends.text.segments import Segment


def with_memory(start: Start, ids: list[int], tokenizer: PromptTokenizer) -> Start:
    """``start`` with the text of ``ids`` before its prompt (special tokens special)."""
    check_context(ids, vocab_size=tokenizer.vocab_size, context_length=start.context_length)
    return msgspec.structs.replace(start, prompt=[Segment(tokenizer.decode(ids), special=True), *start.prompt])


def context_ids(tokenizer: PromptTokenizer, prompt: list[Segment], reply: str) -> list[int]:
    """The ids of the prompt and the reply, as Ollama gives them back: tokenised again."""
    return [int(t) for t in tokenizer.encode([*prompt, Segment(reply, special=True)])]
