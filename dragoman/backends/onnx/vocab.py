"""Each token's raw bytes, read from ``tokenizer.json``, for logprobs.

OpenAI's logprobs carry a token's UTF-8 ``bytes``; decoding one token through the
tokenizer loses them (a lone half of a multi-byte character becomes U+FFFD). Byte-level
BPE vocabularies (GPT-2 style) and SentencePiece vocabularies with byte fallback spell
every token's bytes recoverably, so the table is built once per model.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import msgspec

_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@cache
def byte_level_alphabet() -> dict[str, int]:
    """GPT-2's ``bytes_to_unicode`` inverted: printable stand-in character → byte."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def token_bytes_table(tokenizer_json: dict[str, Any]) -> dict[int, bytes] | None:
    """Token id → bytes, or None when the vocabulary's spelling is not understood."""
    model = tokenizer_json.get("model") or {}
    vocab: dict[str, int] = dict(model.get("vocab") or {})
    if not vocab or not isinstance(vocab, dict):
        return None
    for added in tokenizer_json.get("added_tokens") or []:
        vocab[added["content"]] = added["id"]
    added_contents = {a["content"] for a in tokenizer_json.get("added_tokens") or []}
    if _is_byte_level(tokenizer_json):
        alphabet = byte_level_alphabet()
        return {
            i: piece.encode() if piece in added_contents else _byte_level_bytes(piece, alphabet)
            for piece, i in vocab.items()
        }
    if model.get("byte_fallback") or "▁" in "".join(list(vocab)[:2000]):
        return {i: _sentencepiece_bytes(piece) for piece, i in vocab.items()}
    return None


def load_token_bytes(model_dir: Path) -> dict[int, bytes] | None:
    try:
        data = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return token_bytes_table(data)


class TokenizerFacts(msgspec.Struct, frozen=True):
    """What the server needs to know of a vocabulary before sending a prompt."""

    special: frozenset[str] = frozenset()  # added tokens marked special (a default decode hides them)
    added: frozenset[str] = frozenset()  # every added token: the tokenizer matches each as a unit
    longest_token_bytes: int = 0  # bytes of the longest token's text; 0 when unknown
    added_by_id: dict[int, str] = {}  # the added tokens' texts by id (end tokens are among them)


def read_tokenizer_facts(model_dir: Path) -> TokenizerFacts:
    try:
        data = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return TokenizerFacts()
    added = data.get("added_tokens") or []
    table = token_bytes_table(data)
    return TokenizerFacts(
        special=frozenset(a["content"] for a in added if a.get("special") and a.get("content")),
        added=frozenset(a["content"] for a in added if a.get("content")),
        longest_token_bytes=max((len(b) for b in table.values()), default=0) if table else 0,
        added_by_id={a["id"]: a["content"] for a in added if isinstance(a.get("id"), int) and a.get("content")},
    )


def _is_byte_level(tokenizer_json: dict[str, Any]) -> bool:
    def mentions(node: Any) -> bool:
        if isinstance(node, dict):
            return node.get("type") == "ByteLevel" or any(mentions(v) for v in node.values())
        if isinstance(node, list):
            return any(mentions(v) for v in node)
        return False

    return mentions(tokenizer_json.get("decoder")) or mentions(tokenizer_json.get("pre_tokenizer"))


def _byte_level_bytes(piece: str, alphabet: dict[str, int]) -> bytes:
    try:
        return bytes(alphabet[c] for c in piece)
    except KeyError:
        return piece.encode()


def _sentencepiece_bytes(piece: str) -> bytes:
    match = _BYTE_TOKEN.fullmatch(piece)
    if match:
        return bytes([int(match.group(1), 16)])
    return piece.replace("▁", " ").encode()
