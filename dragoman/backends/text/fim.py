"""Fill-in-the-middle: a model's FIM tokens and the prompt they frame.

A model trained for FIM has three control tokens — prefix, suffix, middle — and
writes what goes between a prefix and a suffix when given
``<prefix>PREFIX<suffix>SUFFIX<middle>`` (prefix-suffix-middle order, which the
spellings below use). The frame is the model's own control tokens (special
segments); the prefix and suffix are the client's text (plain segments), so a
client's ``<|im_start|>`` never becomes a turn, here as in chat.

Detection is by the vocabulary's added tokens: a model whose tokenizer has none of
these triples has no ``insert`` capability, and a suffix for it is a 400.
"""

from __future__ import annotations

from collections.abc import Collection

import msgspec

from dragoman.backends.text.segments import Segment, merged


class FimTokens(msgspec.Struct, frozen=True):
    prefix: str
    suffix: str
    middle: str

    def segments(self, prefix: str, suffix: str) -> list[Segment]:
        """The prompt: the frame special, the client's prefix and suffix plain."""
        return merged(
            [
                Segment(self.prefix),
                Segment(prefix, special=False),
                Segment(self.suffix),
                Segment(suffix, special=False),
                Segment(self.middle),
            ]
        )

    def go_template(self) -> str:
        """The frame as Ollama writes it in a model's template. Clients read a
        ``.Suffix`` in ``/api/show``'s template as "this model does FIM" (Continue)."""
        return (
            f"{{{{- if .Suffix }}}}{self.prefix}{{{{ .Prompt }}}}{self.suffix}{{{{ .Suffix }}}}{self.middle}"
            "{{- else }}{{ .Prompt }}{{- end }}"
        )


# The common spellings, each a model family's: first match wins.
SPELLINGS = (
    FimTokens("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),  # Qwen2.5-Coder, CodeGemma
    FimTokens("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),  # StarCoder/2, SantaCoder, Granite Code, Refact
    FimTokens("<fim-prefix>", "<fim-suffix>", "<fim-middle>"),  # StableCode, some StarCoder forks
    FimTokens("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),  # DeepSeek-Coder
)


def find_fim(token_texts: Collection[str]) -> FimTokens | None:
    """The FIM tokens among a vocabulary's added-token texts, or None."""
    for spelling in SPELLINGS:
        if spelling.prefix in token_texts and spelling.suffix in token_texts and spelling.middle in token_texts:
            return spelling
    return None


__all__ = ["SPELLINGS", "FimTokens", "find_fim"]
