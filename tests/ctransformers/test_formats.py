"""Which files ctransformers 0.2.27 loads, decided from headers: one flaw per case,
each a way the bundled loader fails (or crashes) — and the clean files do load."""

from __future__ import annotations

import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dragoman.backends.ctransformers.formats import UnsupportedModelFile, inspect_model_file
from dragoman.backends.gguf_file import Field, TensorInfo, ValueType
from dragoman.config import ConfigError
from tests.ctransformers.conftest import needs_library
from tests.ctransformers.ggml_files import BPE_VOCAB, llama_gguf_parts, write_gguf_file, write_gpt2_ggml
from tests.support.server import config_from_yaml

Parts = tuple[list[Field], list[TensorInfo]]


def replace_field(key: str, value: object, type_: ValueType | None = None) -> Callable[[Parts], Parts]:
    def edit(parts: Parts) -> Parts:
        fields, tensors = parts
        out = [f for f in fields if f.key != key]
        old = next((f for f in fields if f.key == key), None)
        if value is not None:
            assert old is not None or type_ is not None
            out.append(Field(key, type_ or old.type, value, old.item_type if old else None))  # type: ignore[union-attr]
        return out, tensors

    return edit


def drop_tensor(name: str) -> Callable[[Parts], Parts]:
    return lambda parts: (parts[0], [t for t in parts[1] if t.name != name])


def add_tensor(name: str, dims: tuple[int, ...], type_: int = 0) -> Callable[[Parts], Parts]:
    return lambda parts: (parts[0], [*parts[1], TensorInfo(name, dims, type_, 0)])


def retype_tensor(name: str, type_: int) -> Callable[[Parts], Parts]:
    return lambda parts: (parts[0], [TensorInfo(t.name, t.dims, type_, 0) if t.name == name else t for t in parts[1]])


BYTE_LEVEL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "Ċ", "Ġ", "a", "b", "Ġa"]
FLAW_CASES: list[tuple[str, str, Callable[[Parts], Parts], str, bool]] = [
    ("another architecture", "llama", replace_field("general.architecture", "gpt2"), "architecture is 'gpt2'", False),
    ("an unknown tokenizer", "llama", replace_field("tokenizer.ggml.model", "bert"), "tokenizer is 'bert'", False),
    (
        "no scores (current BPE converters)",
        "gpt2",
        replace_field("tokenizer.ggml.scores", None),
        "no tokenizer.ggml.scores",
        True,
    ),
    (
        "a byte-level BPE vocabulary",
        "gpt2",
        replace_field("tokenizer.ggml.tokens", BYTE_LEVEL),
        "byte-level encoded",
        True,
    ),
    (
        "a BPE vocabulary without newline",
        "gpt2",
        replace_field("tokenizer.ggml.tokens", ["x", *BPE_VOCAB[:3], *BPE_VOCAB[4:]]),
        "no newline token",
        False,
    ),
    (
        "SentencePiece without <0x0A>",
        "llama",
        replace_field("tokenizer.ggml.tokens", ["<unk>", "<s>", "</s>", "x", "▁", "a", "b", "▁a"]),
        "<0x0A>",
        False,
    ),
    ("a tensor type newer than this ggml", "llama", retype_tensor("blk.0.attn_q.weight", 30), "predates: BF16", False),
    ("tied embeddings", "llama", drop_tensor("output.weight"), "no output.weight", True),
    ("a missing tensor", "llama", drop_tensor("blk.0.ffn_up.weight"), "missing: blk.0.ffn_up.weight", False),
    ("a bias (Qwen-style)", "llama", add_tensor("blk.0.attn_q.bias", (32,)), "does not know: blk.0.attn_q.bias", False),
    (
        "an hparam that is not u32",
        "llama",
        replace_field("llama.block_count", 1, ValueType.UINT64),
        "'llama.block_count' is missing or not a u32",
        False,
    ),
    (
        "a rope dimension the loader rejects",
        "llama",
        replace_field("llama.rope.dimension_count", 8),
        "rope dimension (8)",
        False,
    ),
]


@pytest.mark.parametrize(
    ("name", "tokenizer", "edit", "reason", "convertible"), FLAW_CASES, ids=[c[0] for c in FLAW_CASES]
)
def test_gguf_flaws_are_refused_with_the_reason(
    tmp_path: Path, name: str, tokenizer: str, edit: Callable[[Parts], Parts], reason: str, convertible: bool
) -> None:
    base = llama_gguf_parts(vocab=BPE_VOCAB, tokenizer="gpt2") if tokenizer == "gpt2" else llama_gguf_parts()
    fields, tensors = edit(base)
    path = write_gguf_file(tmp_path / "model.gguf", fields, tensors)
    with pytest.raises(UnsupportedModelFile) as caught:
        inspect_model_file(path, None)
    message = str(caught.value)
    assert reason in message
    assert ("dragoman.backends.ctransformers.convert" in message) == convertible
    assert "backend: ollama" in message and "dragoman models prepare" in message


@pytest.mark.parametrize("tokenizer", ["llama", "gpt2"])
@pytest.mark.parametrize("version", [2, 3])
def test_clean_gguf_files_pass(tmp_path: Path, tokenizer: str, version: int) -> None:
    parts = llama_gguf_parts(vocab=BPE_VOCAB, tokenizer="gpt2") if tokenizer == "gpt2" else llama_gguf_parts()
    file = inspect_model_file(write_gguf_file(tmp_path / "m.gguf", *parts, version=version), None)
    assert (file.container, file.model_type, file.tokenizer, file.version) == ("gguf", "gguf", tokenizer, version)
    assert file.add_bos == (tokenizer == "llama")


@needs_library
@pytest.mark.parametrize("tokenizer", ["llama", "gpt2"])
def test_what_passes_the_check_loads(tmp_path: Path, tokenizer: str) -> None:
    from ctransformers.llm import LLM

    parts = llama_gguf_parts(vocab=BPE_VOCAB, tokenizer="gpt2") if tokenizer == "gpt2" else llama_gguf_parts()
    path = write_gguf_file(tmp_path / "m.gguf", *parts)
    inspect_model_file(path, None)
    llm = LLM(str(path), "gguf")
    assert llm.vocab_size == 8 and llm.model_type == "llama"


@needs_library
def test_a_flawed_file_fails_to_load_too(tmp_path: Path) -> None:
    """The check is not stricter than the loader: what it refuses for a missing
    output.weight, the library refuses as well."""
    from ctransformers.llm import LLM

    fields, tensors = drop_tensor("output.weight")(llama_gguf_parts())
    path = write_gguf_file(tmp_path / "m.gguf", fields, tensors)
    with pytest.raises(RuntimeError, match="Failed to create LLM"):
        LLM(str(path), "gguf")


GGML_CASES: list[tuple[str, bytes, str | None, str | None, str | None]] = [
    ("ggml needs a model_type", b"lmgg", None, None, "set model_type to one of gpt2"),
    ("ggml with one", b"lmgg", "gpt_neox", "gpt_neox", None),
    ("ggjt with llama", b"tjgg\x03\x00\x00\x00", "llama", "llama", None),
    ("ggjt refuses gpt2", b"tjgg\x03\x00\x00\x00", "gpt2", None, "model_type 'gpt2' cannot read a 'ggjt' file"),
    ("ggcc is falcon's own", b"ccgg\x0a\x00\x00\x00", None, "falcon", None),
    ("anything else", b"PK\x03\x04", "gpt2", None, "neither GGUF nor a GGML-era file"),
    ("a big-endian GGUF", b"GGUF\x00\x00\x00\x03", None, None, "big-endian"),
]


@pytest.mark.parametrize(
    ("name", "head", "model_type", "loads_as", "error"), GGML_CASES, ids=[c[0] for c in GGML_CASES]
)
def test_container_by_magic(
    tmp_path: Path, name: str, head: bytes, model_type: str | None, loads_as: str | None, error: str | None
) -> None:
    path = tmp_path / "model.bin"
    path.write_bytes(head + b"\0" * 64)
    if error is None:
        assert inspect_model_file(path, model_type).model_type == loads_as
    else:
        with pytest.raises(UnsupportedModelFile, match=error):
            inspect_model_file(path, model_type)


def test_gguf_version_1_headers_are_read(tmp_path: Path) -> None:
    """GGUF v1 wrote counts and string lengths as u32 (the bundled loader reads it)."""
    key, value = b"general.architecture", b"falcon"
    header = b"GGUF" + struct.pack("<III", 1, 0, 1) + struct.pack("<I", len(key)) + key
    header += struct.pack("<II", ValueType.STRING, len(value)) + value
    path = tmp_path / "v1.gguf"
    path.write_bytes(header)
    with pytest.raises(UnsupportedModelFile) as caught:  # no tokenizer: read, then refused
        inspect_model_file(path, None)
    assert "tokenizer is 'None'" in str(caught.value)


# -- at config check ---------------------------------------------------------------------


def entry(path: Path | str, extra: str = "") -> str:
    return f"""\
        models:
          - name: m
            backend: ctransformers
            path: {path}
            {extra}
        """


def test_config_check_refuses_a_modern_gguf(smollm2_source: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_yaml(entry(smollm2_source))
    message = str(caught.value)
    assert "models[0]" in message and "byte-level encoded" in message
    assert "python -m dragoman.backends.ctransformers.convert" in message and "backend: ollama" in message


CONFIG_CASES = [
    ("a folder", "{tmp}", "", "is a folder"),
    ("an unknown model_type", "{tmp}/x.bin", "model_type: gpt5", "model_type 'gpt5' is not one of"),
    ("a GGML file without model_type", "{ggml}", "", "set model_type"),
]


@pytest.mark.parametrize(("name", "path", "extra", "error"), CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES])
def test_config_check_errors(tmp_path: Path, name: str, path: str, extra: str, error: str) -> None:
    ggml = write_gpt2_ggml(tmp_path / "gpt2.bin")
    with pytest.raises(ConfigError, match=error):
        config_from_yaml(entry(path.format(tmp=tmp_path, ggml=ggml), extra))


def test_config_check_accepts_a_missing_file_and_good_ones(tmp_path: Path, smollm2_gguf: Path) -> None:
    """A model file still downloading must not stop the gateway; loading reports it."""
    assert config_from_yaml(entry(tmp_path / "later.gguf")).models[0].settings.path.endswith("later.gguf")
    config_from_yaml(entry(smollm2_gguf))
    config_from_yaml(entry(write_gpt2_ggml(tmp_path / "gpt2.bin"), "model_type: gpt2"))


def test_settings_need_no_library(tmp_path: Path) -> None:
    """Importing the package must not import ctransformers (the extra is optional)."""
    code = (
        "import sys, dragoman.backends.ctransformers as b; b.CTransformersSettings(path='x'); "
        "print('ctransformers' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).parents[2]
    )
    assert out.stdout.strip() == "False"
