"""Prompt segments → token ids, in the worker.

The model's ``tokenizer.json`` is read by Hugging Face ``tokenizers`` twice: as it is
(for special segments: a special token's text becomes its id, as the chat template
intends) and without its added tokens (for plain segments: the same text becomes
ordinary tokens). Measured on SmolLM2's vocabulary, ``tokenizers`` gives the library's
ids for ordinary text, in linear time (0.5 s for 512 KiB of letters without
whitespace, where the library's own tokenizer took 53 s), and ``encode_batch`` lets go
of the GIL, so the worker's other threads run meanwhile.

A model folder without a ``tokenizer.json`` that ``tokenizers`` reads falls back to
the library's tokenizer, with special-token texts of plain segments broken apart so
that they cannot match.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dragoman.backends.text.segments import Segment

log = logging.getLogger("dragoman.onnx.worker")


class PromptTokenizer:
    def __init__(self, model_dir: Path, library_tokenizer: Any) -> None:
        self.library = library_tokenizer
        self._special: Any = None
        self._plain: Any = None
        self._added: list[str] = []
        try:
            raw = (model_dir / "tokenizer.json").read_text(encoding="utf-8")
            config = json.loads(raw)
            self._added = [a["content"] for a in config.get("added_tokens") or [] if a.get("content")]
            import tokenizers

            self._special = _without_limits(tokenizers.Tokenizer.from_str(raw))
            self._plain = _without_limits(tokenizers.Tokenizer.from_str(json.dumps({**config, "added_tokens": []})))
        except Exception as exc:  # no tokenizer.json, or one tokenizers cannot read
            log.warning("tokenising with the library's tokenizer (%s: %s)", type(exc).__name__, exc)
            self._special = self._plain = None
        self._needles = (
            re.compile("|".join(re.escape(t) for t in sorted(self._added, key=len, reverse=True))) if self._added else None
        )

    @property
    def linear(self) -> bool:
        """True when tokenising takes time linear in the text (``tokenizers``)."""
        return self._special is not None

    def encode(self, segments: Sequence[Segment]) -> np.ndarray:
        if self._special is None:
            return self._encode_with_library(segments)
        ids: list[list[int]] = [[] for _ in segments]
        for special, tokenizer in ((True, self._special), (False, self._plain)):
            chosen = [i for i, s in enumerate(segments) if s.special == special and s.text]
            if chosen:
                encoded = tokenizer.encode_batch([segments[i].text for i in chosen], add_special_tokens=False)
                for i, encoding in zip(chosen, encoded, strict=True):
                    ids[i] = encoding.ids
        return np.fromiter((t for row in ids for t in row), dtype=np.int32)

    @property
    def vocab_size(self) -> int:
        """Ids below this are the tokenizer's own (added tokens included). Only with
        ``tokenizers``."""
        assert self._special is not None
        return int(self._special.get_vocab_size(with_added_tokens=True))

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``, special tokens spelled out (they re-encode as themselves
        in a special segment). Only with ``tokenizers`` (see :attr:`linear`)."""
        assert self._special is not None
        return str(self._special.decode(list(ids), skip_special_tokens=False))

    def _encode_with_library(self, segments: Sequence[Segment]) -> np.ndarray:
        parts: list[np.ndarray] = []
        for segment in segments:
            texts = [segment.text] if segment.special else self._broken(segment.text)
            parts.extend(np.asarray(self.library.encode(t), dtype=np.int32) for t in texts if t)
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)

    def _broken(self, text: str) -> list[str]:
        """``text`` in pieces none of which holds a special token's whole text: each
        occurrence is split after its first character (and again, should the rest
        still hold one)."""
        if self._needles is None:
            return [text]
        pieces: list[str] = []
        position = 0
        for match in self._needles.finditer(text):
            pieces.append(text[position : match.start()])
            pieces.append(match.group()[0])
            pieces.extend(self._broken(match.group()[1:]))
            position = match.end()
        pieces.append(text[position:])
        return pieces


def _without_limits(tokenizer: Any) -> Any:
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer
