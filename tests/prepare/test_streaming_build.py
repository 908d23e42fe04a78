"""The streaming build (a GGUF read one layer at a time, int4 quantized layer by layer)
against the full-model path (the float32 folder, quantized whole): the same int4 model,
tensor for tensor, and the same logits, on tiny random-weight quantized GGUFs. Each
path builds into its own home, so neither reuses the other's build."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from dragoman.backends.onnx.prepare import prepare
from dragoman.backends.onnx.prepare.build import PATH_VARIABLE
from dragoman.backends.onnx.prepare.support import Progress
from tests.prepare.checks import TOLERANCE, expected_prompt, onnx_logits
from tests.prepare.tiny_models import make_tiny


def initializers(model_dir: Path) -> dict[str, bytes]:
    import onnx

    model = onnx.load(str(model_dir / "model.onnx"))
    return {t.name: onnx.numpy_helper.to_array(t).tobytes() for t in model.graph.initializer}


def build(ref: str, home: Path, full: bool, monkeypatch: pytest.MonkeyPatch, provider: str = "cpu") -> tuple[Path, list[str]]:
    if full:
        monkeypatch.setenv(PATH_VARIABLE, "full")
    else:
        monkeypatch.delenv(PATH_VARIABLE, raising=False)
    output = io.StringIO()
    built = prepare(ref, provider=provider, precision="int4", home=home, progress=Progress(4, stream=output))
    return built.path, output.getvalue().splitlines()


@pytest.mark.parametrize(("arch", "quantize", "provider"), [
    ("qwen2", "Q8_0", "cpu"), ("llama", "Q4_0", "cpu"), ("gemma3", "Q8_0", "cpu"), ("mistral", "Q8_0", "cpu"),
    ("qwen2", "Q8_0", "dml"),  # float16 weights and separate q/k/v projections
])  # fmt: skip
def test_the_streaming_build_makes_the_full_paths_int4_model(
    arch: str, quantize: str, provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny = make_tiny(arch, tmp_path, quantize=quantize)
    assert tiny.gguf is not None
    streamed, streamed_notes = build(str(tiny.gguf), tmp_path / "streamed", False, monkeypatch, provider)
    full, full_notes = build(str(tiny.gguf), tmp_path / "full", True, monkeypatch, provider)
    assert "building with the streaming path (the GGUF is read one layer at a time)" in streamed_notes
    assert f"building with the full-model path because {PATH_VARIABLE}=full" in full_notes
    assert initializers(streamed) == initializers(full)
    if provider != "cpu":
        return  # the graph for a GPU is the same bytes; its logits are test_targets.py's business
    ids = tiny.tokenizer(expected_prompt(tiny.tokenizer), add_special_tokens=False)["input_ids"]
    (streamed_logits, streamed_tokens), (full_logits, full_tokens) = onnx_logits(streamed, ids), onnx_logits(full, ids)
    assert streamed_tokens == full_tokens
    for ours, theirs in zip(streamed_logits, full_logits, strict=True):
        assert float(np.abs(ours - theirs).max()) < TOLERANCE


def test_an_architecture_the_streaming_build_does_not_read_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tiny = make_tiny("lfm2", tmp_path)
    assert tiny.gguf is not None
    _, notes = build(str(tiny.gguf), tmp_path / "home", False, monkeypatch)
    assert any(n.startswith("building with the full-model path because transformers reads LFM2 GGUFs") for n in notes)
