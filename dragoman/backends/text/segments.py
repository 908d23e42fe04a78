"""A prompt as segments: which text may contain control tokens and which may not.

A backend tokenises a :class:`Segment` with ``special=True`` as a template does: the
text of a special token (``<|im_start|>``) becomes that token's id. A segment with
``special=False`` is tokenised as plain text, so the same characters become ordinary
tokens. Client text must never reach the model as control tokens (else a user message
containing ``<|im_start|>system`` forges a system turn), so every occurrence of a
special token's text in client strings ends up in a non-special segment.

Rendering a chat template puts client strings and template text into one string, so
:class:`Guard` marks the dangerous substrings of client strings before rendering:
each becomes a placeholder ``⦃<n>⦄`` (rare characters a template passes through
untouched), and :meth:`Guard.segments` turns the rendered
text back into segments, each placeholder becoming its original text, not special.
Client text without such substrings stays inside the special segments around it:
tokenising it there gives the same ids as alone, and cutting the prompt at every
client string would change how the tokens around each cut merge.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import msgspec

# Printable (so even a template that prints a dict's repr keeps them) and rare.
OPEN = "\u2983"  # ⦃
CLOSE = "\u2984"  # ⦄
_PLACEHOLDER = re.compile(f"{OPEN}(\\d+){CLOSE}")


class Segment(msgspec.Struct, array_like=True, frozen=True):
    text: str
    special: bool = True


def prompt_text(segments: Iterable[Segment]) -> str:
    return "".join(s.text for s in segments)


def prompt_bytes(segments: Iterable[Segment]) -> int:
    return sum(len(s.text.encode("utf-8", errors="surrogatepass")) for s in segments)


def merged(segments: Iterable[Segment]) -> list[Segment]:
    """Neighbours of the same kind joined, empty ones dropped."""
    out: list[Segment] = []
    for segment in segments:
        if not segment.text:
            continue
        if out and out[-1].special == segment.special:
            out[-1] = Segment(out[-1].text + segment.text, segment.special)
        else:
            out.append(segment)
    return out


class Guard:
    """Hides ``protected`` substrings (special-token texts) of client strings from a
    template; one per rendering. The placeholder characters themselves are protected
    too, so a client cannot forge a placeholder."""

    def __init__(self, protected: Iterable[str]) -> None:
        needles = sorted({p for p in protected if p} | {OPEN, CLOSE}, key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(n) for n in needles))
        self._literals: list[str] = []

    def text(self, value: str) -> str:
        """``value`` with every protected substring replaced by a placeholder."""
        return self._pattern.sub(self._hide, value)

    def value(self, value: Any) -> Any:
        """Strings anywhere in JSON-like data (dict keys too) guarded."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.value(k): self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value

    def segments(self, rendered: str) -> list[Segment]:
        """The rendered prompt: placeholders back to their text, as plain segments."""
        pieces: list[Segment] = []
        position = 0
        for match in _PLACEHOLDER.finditer(rendered):
            index = int(match.group(1))
            if index >= len(self._literals):
                continue  # not one of ours: cannot happen, since clients cannot write OPEN
            pieces.append(Segment(rendered[position : match.start()], True))
            pieces.append(Segment(self._literals[index], False))
            position = match.end()
        pieces.append(Segment(rendered[position:], True))
        return merged(pieces)

    def _hide(self, match: re.Match[str]) -> str:
        self._literals.append(match.group())
        return f"{OPEN}{len(self._literals) - 1}{CLOSE}"


def fewest_tokens(segments: Iterable[Segment], longest_token_bytes: int) -> int:
    """A lower bound on the prompt's tokens, without tokenising: no token spells
    more than ``longest_token_bytes`` bytes (nor does a special token), so it takes
    at least bytes / longest tokens. Holds for every vocabulary that spells each
    token's bytes (byte-level BPE, SentencePiece with byte fallback) and a tokenizer
    that removes nothing; 0 when the longest token is unknown."""
    if longest_token_bytes <= 0:
        return 0
    return -(-prompt_bytes(segments) // longest_token_bytes)
