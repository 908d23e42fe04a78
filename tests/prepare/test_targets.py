"""Builds for the other targets and sources than fp32 on CPU: a quantized GGUF
(dequantized by transformers), int4 on CPU, and DirectML and CUDA graphs — made here on
Linux, checked for what makes them the GPU kind, and run on CPU (slowly, but the same
graph a GPU machine gets)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dragoman.backends.onnx.prepare import prepare
from dragoman.backends.onnx.prepare.sources import resolve
from tests.prepare.checks import assert_matches_pytorch, expected_prompt, onnx_logits, torch_logits
from tests.prepare.tiny_models import make_tiny


def test_a_quantized_gguf_builds_the_model_transformers_dequantizes(tmp_path: Path, home: Path) -> None:
    from transformers import AutoModelForCausalLM

    tiny = make_tiny("qwen2", tmp_path, quantize="Q8_0")
    assert tiny.gguf is not None
    build = prepare(str(tiny.gguf), precision="fp32", home=home, progress=False)
    assert resolve(str(tiny.gguf), home=home).quantization == "Q8_0"
    dequantized = AutoModelForCausalLM.from_pretrained(tiny.gguf.parent, gguf_file=tiny.gguf.name).eval()
    ids = tiny.tokenizer(expected_prompt(tiny.tokenizer), add_special_tokens=False)["input_ids"]
    assert_matches_pytorch(build.path, dequantized, ids)
    # and the dequantized model is close to the original: Q8_0 loses little
    original = torch_logits(tiny.model, ids)
    assert np.abs(torch_logits(dequantized, ids) - original).max() < 0.1 * np.abs(original).max()


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return make_tiny("llama", tmp_path_factory.mktemp("llama"))


def test_int4_on_cpu_stays_close_to_pytorch(tiny_llama, home: Path) -> None:  # type: ignore[no-untyped-def]
    build = prepare(str(tiny_llama.gguf), home=home, progress=False)
    assert build.id == "tiny-int4-cpu" and build.record.precision == "int4"
    ids = tiny_llama.tokenizer(expected_prompt(tiny_llama.tokenizer), add_special_tokens=False)["input_ids"]
    assert "MatMulNBits" in _op_types(build.path)
    assert_close_to(build.path, tiny_llama, ids)


@pytest.mark.parametrize(("provider", "precision"), [("dml", "int4"), ("dml", "fp16"), ("cuda", "int4")])
def test_gpu_graphs_are_built_on_linux_and_run_on_cpu(tiny_llama, home: Path, provider: str, precision: str) -> None:  # type: ignore[no-untyped-def]
    import onnx

    build = prepare(str(tiny_llama.gguf), provider=provider, precision=precision, home=home, progress=False)
    assert build.id == f"tiny-{precision}-{provider}" and build.record.provider == provider
    genai = json.loads((build.path / "genai_config.json").read_text())
    options = genai["model"]["decoder"]["session_options"]["provider_options"]
    assert [next(iter(o)) for o in options] == [provider]
    graph = onnx.load(str(build.path / "model.onnx"), load_external_data=False).graph
    io_types = {i.name: i.type.tensor_type.elem_type for i in graph.output}
    assert io_types["logits"] == onnx.TensorProto.FLOAT16  # GPU graphs have fp16 I/O
    if provider == "dml":  # separate q/k/v and rotary nodes, no fused qkv (see docs/onnxruntime-genai-notes.md)
        names = [n.name for n in graph.node]
        assert any("q_proj" in n for n in names) and not any("qkv_proj" in n for n in names)
    ids = tiny_llama.tokenizer(expected_prompt(tiny_llama.tokenizer), add_special_tokens=False)["input_ids"]
    cpu_copy = build.path.parent / f".{build.id}-on-cpu"
    _copy_for_cpu(build.path, cpu_copy)
    assert_close_to(cpu_copy, tiny_llama, ids)


def assert_close_to(folder: Path, tiny, ids: list[int]) -> None:  # type: ignore[no-untyped-def]
    """Quantized weights of a random tiny model move its logits a lot (int4 blocks of
    32 over rows of 64), so the check is that they still follow PyTorch's."""
    (logits, *_), _ = onnx_logits(folder, ids, steps=1)
    reference = torch_logits(tiny.model, ids)
    correlation = float(np.corrcoef(logits.astype(np.float64), reference.astype(np.float64))[0, 1])
    assert np.isfinite(logits).all() and correlation > 0.5  # observed 0.72 for int4


def _op_types(folder: Path) -> set[str]:
    import onnx

    return {n.op_type for n in onnx.load(str(folder / "model.onnx"), load_external_data=False).graph.node}


def _copy_for_cpu(folder: Path, target: Path) -> None:
    """The same graph with the provider option removed, so onnxruntime-genai loads it on CPU."""
    import shutil

    shutil.copytree(folder, target, dirs_exist_ok=True)
    config = json.loads((target / "genai_config.json").read_text())
    config["model"]["decoder"]["session_options"]["provider_options"] = []
    (target / "genai_config.json").write_text(json.dumps(config))
