"""Fill-in-the-middle tokens: which spellings are found, and the frame they make."""

from __future__ import annotations

import pytest

from dragoman.backends.text.fim import SPELLINGS, FimTokens, find_fim
from dragoman.backends.text.segments import Segment

SMOLLM2 = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>", "<file_sep>", "<filename>"}
FOUND = [
    ("Qwen2.5-Coder", {"<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>"}, SPELLINGS[0]),
    ("StarCoder", {"<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>", "<filename>"}, SPELLINGS[1]),
    ("StableCode", {"<fim-prefix>", "<fim-middle>", "<fim-suffix>"}, SPELLINGS[2]),
    ("DeepSeek-Coder", {"<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"}, SPELLINGS[3]),
    ("SmolLM2 has none", SMOLLM2, None),
    ("two of three is none", {"<fim_prefix>", "<fim_suffix>"}, None),
]  # fmt: skip


@pytest.mark.parametrize(("name", "tokens", "expected"), FOUND, ids=[c[0] for c in FOUND])
def test_find_fim(name: str, tokens: set[str], expected: FimTokens | None) -> None:
    assert find_fim(tokens) == expected


def test_the_frame_is_special_and_the_client_text_plain() -> None:
    fim = SPELLINGS[1]
    assert fim.segments("def add(a, b):\n    return ", "\n\nprint(add(1, 2))") == [
        Segment("<fim_prefix>"),
        Segment("def add(a, b):\n    return ", special=False),
        Segment("<fim_suffix>"),
        Segment("\n\nprint(add(1, 2))", special=False),
        Segment("<fim_middle>"),
    ]
    # An empty prefix or suffix leaves the frame whole.
    assert fim.segments("", "") == [Segment("<fim_prefix><fim_suffix><fim_middle>")]


def test_the_go_template_names_the_suffix_as_ollama_templates_do() -> None:
    template = SPELLINGS[0].go_template()
    assert ".Suffix" in template  # Continue's test for "this model does FIM"
    assert template == (
        "{{- if .Suffix }}<|fim_prefix|>{{ .Prompt }}<|fim_suffix|>{{ .Suffix }}<|fim_middle|>"
        "{{- else }}{{ .Prompt }}{{- end }}"
    )
