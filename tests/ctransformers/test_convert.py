"""Rewriting a current GGUF into the layout ctransformers 0.2.27 loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from dragoman.backends.ctransformers.convert import ConversionError, convert_gguf, decode_token, legacy_merge, main
from dragoman.backends.ctransformers.formats import inspect_model_file
from dragoman.backends.gguf_file import read_gguf
from tests.ctransformers.conftest import needs_library
from tests.ctransformers.ggml_files import llama_gguf_parts, write_gguf_file

DECODE_CASES = [
    ("space", "Ġthe", " the"),
    ("newline", "Ċ", "\n"),
    ("tab", "ĉ", "\t"),
    ("printable ASCII stands for itself", "Hello!", "Hello!"),
    ("a whole UTF-8 character", "Ã©", "é"),
    ("half a character stays bytes", "Ã", b"\xc3".decode("utf-8", "surrogateescape")),
    ("added tokens outside the table stay", "<|im_start|>", "<|im_start|>"),
    ("text outside the table stays", "日本", "日本"),
]


@pytest.mark.parametrize(("name", "token", "expected"), DECODE_CASES, ids=[c[0] for c in DECODE_CASES])
def test_decode_token(name: str, token: str, expected: str) -> None:
    assert decode_token(token) == expected


MERGE_CASES = [
    ("space stays Ġ (the old find_bpe_rank maps it)", "Ġ t", "Ġ t"),
    ("newline stays Ċ", "Ċ Ċ", "Ċ Ċ"),
    ("other bytes become raw", "Ã ©", "\udcc3 \udca9"),
    ("tab becomes raw", "ĉ ĉ", "\t \t"),
    ("plain halves", "h e", "h e"),
]


@pytest.mark.parametrize(("name", "merge", "expected"), MERGE_CASES, ids=[c[0] for c in MERGE_CASES])
def test_legacy_merge(name: str, merge: str, expected: str) -> None:
    assert legacy_merge(merge) == expected


def test_smollm2_is_rewritten_loadable(smollm2_gguf: Path, smollm2_source: Path) -> None:
    file = inspect_model_file(smollm2_gguf, None)
    assert (file.architecture, file.tokenizer, file.quantization, file.version) == ("llama", "gpt2", "Q4_1", 2)
    assert file.special_tokens["<|im_start|>"] == 1 and 2 in file.end_tokens
    converted, source = read_gguf(smollm2_gguf), read_gguf(smollm2_source)
    assert converted.get("dragoman.converted_from") == smollm2_source.name
    # Tensors are copied byte for byte; the tied head is the embedding's bytes.
    names = [t.name for t in converted.tensors]
    assert names == [t.name for t in source.tensors] + ["output.weight"]
    with open(smollm2_gguf, "rb") as out, open(smollm2_source, "rb") as src:
        for new, old in ((converted.tensors[-1], source.tensors[0]), (converted.tensors[5], source.tensors[5])):
            out.seek(converted.data_offset + new.offset)
            src.seek(source.data_offset + old.offset)
            assert out.read(4096) == src.read(4096)


@needs_library
def test_converted_tokenizer_matches_the_original(smollm2_gguf: Path) -> None:
    """Ids as SmolLM2's Hugging Face tokenizer gives them (checked against
    ``transformers`` with the original GGUF when this test was written)."""
    from ctransformers.llm import LLM

    llm = LLM(str(smollm2_gguf), "gguf")
    cases = {
        "Hello world, how are you?": [19556, 905, 28, 638, 359, 346, 47],
        "a\tb\n\nc": [81, 197, 82, 198, 198, 83],
    }
    for text, ids in cases.items():
        assert llm.tokenize(text, add_bos_token=False) == ids
        assert llm.detokenize(ids) == text


def test_a_byte_level_tiny_file_is_fixed(tmp_path: Path) -> None:
    fields, tensors = llama_gguf_parts(
        vocab=["<|endoftext|>", "<|im_start|>", "<|im_end|>", "Ċ", "Ġ", "a", "b", "Ġa"], tokenizer="gpt2"
    )
    fields = [f for f in fields if f.key != "tokenizer.ggml.scores"]
    tensors = [t for t in tensors if t.name != "output.weight"]
    source = write_gguf_file(tmp_path / "modern.gguf", fields, tensors, version=3)
    target = convert_gguf(source, tmp_path / "out" / "legacy.gguf")
    file = inspect_model_file(target, None)
    assert read_gguf(target).get("tokenizer.ggml.tokens")[3:] == ["\n", " ", "a", "b", " a"]
    assert file.special_tokens == {"<|im_start|>": 1, "<|im_end|>": 2}  # id 0 is the "unknown" type here
    assert target.stat().st_mode & 0o777 == 0o644


def test_what_cannot_be_rewritten_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    fields, tensors = llama_gguf_parts()
    tensors = [t for t in tensors if t.name != "blk.0.ffn_up.weight"]
    source = write_gguf_file(tmp_path / "broken.gguf", fields, tensors)
    with pytest.raises(ConversionError, match="missing: blk.0.ffn_up.weight"):
        convert_gguf(source, tmp_path / "out.gguf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.gguf"]


def test_cli_reports_errors_without_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "missing.gguf"), str(tmp_path / "out.gguf")]) == 1
    assert "error:" in capsys.readouterr().err
    assert main(["only-one"]) == 2
