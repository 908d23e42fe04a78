"""Token bytes for logprobs, from the vocabulary's own spelling."""

from __future__ import annotations

from pathlib import Path

import pytest

from dragoman.backends.onnx.vocab import byte_level_alphabet, load_token_bytes, read_tokenizer_facts, token_bytes_table


def test_byte_level_alphabet_is_a_bijection_over_bytes() -> None:
    alphabet = byte_level_alphabet()
    assert sorted(alphabet.values()) == list(range(256))
    assert alphabet["Ġ"] == ord(" ") and alphabet["Ċ"] == ord("\n") and alphabet["a"] == ord("a")


TABLES = [
    (
        "byte-level BPE",
        {
            "model": {"vocab": {"Ġhello": 0, "Ã©": 1, "Ġ": 2}},
            "decoder": {"type": "ByteLevel"},
            "added_tokens": [{"id": 3, "content": "<|im_end|>", "special": True}],
        },
        {0: b" hello", 1: "é".encode(), 2: b" ", 3: b"<|im_end|>"},
    ),
    (
        "sentencepiece with byte fallback",
        {
            "model": {"vocab": {"▁hello": 0, "<0x0A>": 1, "<0xC3>": 2}, "byte_fallback": True},
            "decoder": {"type": "Sequence"},
        },
        {0: b" hello", 1: b"\n", 2: b"\xc3"},
    ),
    ("unknown spelling", {"model": {"vocab": {"hello": 0}}, "decoder": {"type": "WordPiece"}}, None),
    ("no vocabulary", {"model": {}}, None),
]


@pytest.mark.parametrize(("name", "data", "expected"), TABLES, ids=[c[0] for c in TABLES])
def test_token_bytes_table(name: str, data: dict[str, object], expected: dict[int, bytes] | None) -> None:
    assert token_bytes_table(data) == expected


def test_real_tokenizer(model_dir: Path) -> None:
    table = load_token_bytes(model_dir)
    assert table is not None and len(table) == 49152
    assert b" Paris" in table.values()
    facts = read_tokenizer_facts(model_dir)
    assert {"<|im_start|>", "<|im_end|>"} <= facts.special and facts.special <= facts.added
    assert "<tool_call>" not in facts.added
    # The longest token is a newline and 80 spaces (byte-level: 81 bytes, 162 in its spelling).
    assert facts.longest_token_bytes == 81
