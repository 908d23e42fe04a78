"""Every listed architecture, as a tiny random-weight model built offline, through each
SOURCE kind it supports (GGUF file, Hugging Face folder, Ollama store): fp32 ONNX logits
against PyTorch's, the chat template, the token ids and the stop token surviving."""

from __future__ import annotations

from pathlib import Path

import pytest

from dragoman.backends.onnx.prepare import prepare
from tests.prepare.checks import (
    assert_matches_pytorch, expected_prompt, onnx_token_ids, rendered_by_dragoman, stop_ids,
)  # fmt: skip
from tests.prepare.tiny_models import make_tiny
from tests.support.ollama_store import Store

ARCHITECTURES = ["llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "nemotron", "lfm2", "granite"]


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_source_kind_builds_the_same_model_as_pytorch(arch: str, tmp_path: Path, home: Path, store: Store) -> None:
    tiny = make_tiny(arch, tmp_path)
    prompt = expected_prompt(tiny.tokenizer)
    ids = tiny.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    sources = {"hf": str(tiny.hf_dir)}
    if tiny.gguf is not None:
        sources["gguf"] = str(tiny.gguf)
        # The GGUF has its own chat template, so Ollama's Go template is not used.
        store.add_model(f"tiny-{arch}", "latest", tiny.gguf, template="{{ .Prompt }}", params={"temperature": 0.5})
        sources["ollama"] = f"ollama:tiny-{arch}"
    builds = {}
    for kind, ref in sources.items():
        build = prepare(ref, precision="fp32", home=home, progress=False)
        builds[kind] = build
        assert_matches_pytorch(build.path, tiny.model, ids)
        assert rendered_by_dragoman(build.path) == prompt, kind
        assert onnx_token_ids(build.path, prompt) == ids, kind
        assert tiny.tokenizer.convert_tokens_to_ids(tiny.arch.eos) in stop_ids(build.path), kind
        assert (build.record.precision, build.record.provider) == ("fp32", "cpu")
    if "ollama" in builds:
        # the same GGUF with the same options is the same build: found by its key, not rebuilt
        assert builds["ollama"].path == builds["gguf"].path
        assert builds["gguf"].record.source.kind == "gguf"  # type: ignore[union-attr]
        assert f"tiny-{arch}:latest" in builds["ollama"].record.names
